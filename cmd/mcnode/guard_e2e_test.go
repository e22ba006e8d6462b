package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Without a daemon the lock dies with mcnode lock, and so must everything
// its command started: a SIGKILL of mcnode lock killed the command itself
// (Pdeathsig), but a shell's children ran on past the lock, overlapping the
// next holder's work once the group had handed the lock on. The guard, a
// helper mcnode lock starts beside the command, kills the command's process
// group when mcnode lock dies: killed alone (kill -9 PID), or together with
// its own process group (kill -9 %1 in a shell, which reaches the guard's
// parent's group but not the guard). When the command ends as usual the
// guard exits without killing: a child the command left behind is the
// command's business, as it was.
func TestE2ELockGuardKillsCommandGroup(t *testing.T) {
	c := newCluster(t, 1, 0)
	for _, tc := range []struct {
		name  string
		group bool // SIGKILL mcnode lock's whole process group, not just mcnode lock
	}{
		{"kill -9 mcnode lock", false},
		{"kill -9 of mcnode lock's process group", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "grandchild")
			// The shell is the command; sleep, in the background, is what it
			// started. The shell writes the pid once sleep runs.
			cmd := c.mcnode(0, "lock", "--no-daemon", "--found", "g", "--", "sh", "-c",
				`sleep 300 >/dev/null 2>&1 & echo $! > "$1.tmp"; mv "$1.tmp" "$1"; wait`, "sh", pidFile)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a shell job of its own
			lock := startLogged(t, cmd, filepath.Join(dir, "lock.log"))
			grandchild, guard := guardedChild(t, lock, pidFile)

			victim := lock.Process.Pid
			if tc.group {
				victim = -victim
			}
			if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = lock.Wait()
			killed := time.Now()
			if !waitGone(grandchild, 2*time.Second) {
				b, _ := os.ReadFile(filepath.Join(dir, "lock.log"))
				t.Fatalf("the command's child (pid %d) still runs %v after mcnode lock was killed (state %q): it would overlap the lock's next holder\nmcnode lock said:\n%s",
					grandchild, time.Since(killed).Round(time.Millisecond), procState(grandchild), b)
			}
			t.Logf("the command's child was gone %v after mcnode lock was killed", time.Since(killed).Round(time.Millisecond))
			if len(guard) != 1 {
				t.Fatalf("mcnode lock ran %d guard processes (%v), want 1", len(guard), guard)
			}
			if !waitGone(guard[0], 2*time.Second) {
				t.Fatalf("the guard (pid %d) still runs 2 s after it killed the command's process group (state %q)", guard[0], procState(guard[0]))
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "lock.log")); !strings.Contains(string(b), "its guard killed the command's process group") {
				t.Errorf("the guard did not say it killed the command's process group:\n%s", b)
			}
		})
	}

	t.Run("the command exits", func(t *testing.T) {
		dir := t.TempDir()
		pidFile, goOn := filepath.Join(dir, "grandchild"), filepath.Join(dir, "go-on")
		// The command leaves a child behind, and ends once the test has
		// seen the guard.
		cmd := c.mcnode(0, "lock", "--no-daemon", "--found", "g", "--", "sh", "-c",
			`sleep 300 >/dev/null 2>&1 & echo $! > "$1.tmp"; mv "$1.tmp" "$1"; while [ ! -e "$2" ]; do sleep 0.02; done`, "sh", pidFile, goOn)
		lock := startLogged(t, cmd, filepath.Join(dir, "lock.log"))
		grandchild, guard := guardedChild(t, lock, pidFile)
		if len(guard) != 1 {
			t.Fatalf("mcnode lock --no-daemon runs %d guard processes (%v) beside its command, want 1", len(guard), guard)
		}
		if pgid, err := syscall.Getpgid(guard[0]); err != nil || pgid != guard[0] {
			t.Errorf("the guard's process group is %d (%v): want one of its own (%d), neither mcnode lock's nor the command's", pgid, err, guard[0])
		}
		if err := os.WriteFile(goOn, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- lock.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				b, _ := os.ReadFile(filepath.Join(dir, "lock.log"))
				t.Fatalf("mcnode lock exited with %v, want status 0:\n%s", err, b)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("mcnode lock did not exit within 10 s of its command")
		}
		if !waitGone(guard[0], 0) {
			t.Errorf("the guard (pid %d) is left behind once mcnode lock has exited (state %q)", guard[0], procState(guard[0]))
		}
		// The guard stood down: what the command left behind is not killed
		// when the command ends as usual (it never was).
		if waitGone(grandchild, 200*time.Millisecond) {
			t.Errorf("the child the command left behind was killed, though mcnode lock exited normally")
		}
	})
}

// startLogged starts cmd with its output in a file (a pipe would keep Wait
// waiting for whatever inherited it), and kills it when the test ends.
func startLogged(t *testing.T, ec *exec.Cmd, log string) *exec.Cmd {
	t.Helper()
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	ec.Stdout, ec.Stderr = f, f
	if err := ec.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ec.Process.Kill() })
	return ec
}

// guardedChild waits until the command under lock has written the pid of
// the child it started to pidFile, and returns it with mcnode lock's guard
// processes; the test kills them all when it ends.
func guardedChild(t *testing.T, lock *exec.Cmd, pidFile string) (grandchild int, guard []int) {
	t.Helper()
	waitFile(t, pidFile, "the command under lock started its child")
	grandchild = readPid(t, pidFile)
	t.Cleanup(func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) })
	guard = childrenOf(lock.Process.Pid, "mcnode-lock-guard")
	for _, pid := range guard {
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
	return grandchild, guard
}

// readPid reads a pid a command wrote to path.
func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("%s holds %q, not a pid", path, b)
	}
	return pid
}

// childrenOf lists the processes whose parent is pid and whose argv[0] is
// argv0, from /proc.
func childrenOf(pid int, argv0 string) []int {
	var kids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if first, _, _ := strings.Cut(string(cmdline), "\x00"); first == argv0 {
			kids = append(kids, p)
		}
	}
	return kids
}

// waitGone polls for up to d for process pid to be gone: no longer in /proc,
// or a zombie (killed, and not yet reaped by whoever inherited it).
func waitGone(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if st := procState(pid); st == "" || st == "Z" {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
