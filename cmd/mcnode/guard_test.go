package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLockGuardProtocol runs the guard (this test binary, as mcnode) against
// a stand-in for the command's process group, a sleep in a group of its
// own, and plays mcnode lock's side of the pipe: the guard kills the group
// only when the pipe closes after the group's id and without a stand-down.
func TestLockGuardProtocol(t *testing.T) {
	for _, tc := range []struct {
		name     string
		write    func(pgid int) string // what mcnode lock writes before it closes the pipe
		wantKill bool
		wantCode int
		wantSay  string
	}{
		{"mcnode lock died while the command ran", func(pgid int) string { return strconv.Itoa(pgid) + "\n" }, true, 0, "its guard killed the command's process group"},
		{"stood down after the command", func(pgid int) string { return strconv.Itoa(pgid) + "\n." }, false, 0, ""},
		{"stood down before the command ran", func(int) string { return "." }, false, 0, ""},
		{"died before the command ran", func(int) string { return "" }, false, 0, ""},
		{"something else than a stand-down", func(pgid int) string { return strconv.Itoa(pgid) + "\nx" }, true, 0, "its guard killed"},
		// kill(-1) would reach every process this user may signal.
		{"process group 1", func(int) string { return "1\n" }, false, 1, "no process group it may kill"},
		{"process group -1", func(int) string { return "-1\n" }, false, 1, "no process group it may kill"},
		{"process group 0", func(int) string { return "0\n" }, false, 1, "no process group it may kill"},
		{"no number", func(int) string { return "x\n" }, false, 1, "no process group it may kill"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := exec.Command("sleep", "60")
			target.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := target.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { _ = target.Wait(); close(exited) }()
			t.Cleanup(func() { _ = target.Process.Kill(); <-exited })

			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			guard := exec.Command(os.Args[0])
			guard.Args = []string{guardArgv0, "l", "json", "4242"}
			guard.Env = append(os.Environ(), "MCNODE_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0", guardEnv+"="+guardProtocol)
			guard.ExtraFiles = []*os.File{r}
			guard.Stdout, guard.Stderr = &out, &out
			if err := guard.Start(); err != nil {
				t.Fatal(err)
			}
			r.Close()
			if _, err := w.WriteString(tc.write(target.Process.Pid)); err != nil {
				t.Fatal(err)
			}
			w.Close()
			code := 0
			var ee *exec.ExitError
			if err := guard.Wait(); errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode {
				t.Errorf("the guard exited with status %d, want %d: %s", code, tc.wantCode, &out)
			}
			select {
			case <-exited:
				if !tc.wantKill {
					t.Errorf("the command's process group was killed: %s", &out)
				}
			case <-time.After(200 * time.Millisecond):
				if tc.wantKill {
					t.Errorf("the command's process group still runs after the guard exited: %s", &out)
				}
			}
			switch got := out.String(); {
			case tc.wantSay == "" && got != "":
				t.Errorf("the guard says %q, want nothing", got)
			case !strings.Contains(got, tc.wantSay):
				t.Errorf("the guard says %q, want %q", got, tc.wantSay)
			}
		})
	}
}

// The guard's environment variable set by mistake, with no pipe from
// mcnode lock, makes mcnode say so rather than act on some descriptor 3.
func TestLockGuardEnvironmentSetByMistake(t *testing.T) {
	for _, value := range []string{guardProtocol, "2"} {
		cmd := exec.Command(os.Args[0], "status")
		cmd.Env = append(os.Environ(), "MCNODE_TEST_MAIN=1", guardEnv+"="+value)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "unset it") {
			t.Errorf("mcnode status with %s=%s: %v: %s; want status %d and a word to unset it", guardEnv, value, err, out, exitUsage)
		}
	}
}
