package main

import (
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// wantClean waits up to 10 s for a background command to exit with status
// 0; what names it in a failure.
func (b *background) wantClean(t *testing.T, what string) {
	t.Helper()
	select {
	case err := <-b.done:
		if err != nil {
			t.Fatalf("%s exited with %v, want status 0: %s", what, err, b.out)
		}
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
		t.Fatalf("%s did not exit within 10 s: %s", what, b.out)
	}
}

// waitFile waits up to 10 s for path to exist.
func waitFile(t *testing.T, path, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s (%s)", what, path)
		}
	}
}

// mcnode lock keeps Ctrl-Z from stopping itself, but not its command in its
// own process group: a command that finds SIGTSTP ignored (as SIG_IGN
// survives exec) could not be suspended. With --foreground, in the
// terminal's process group, the command must not be stopped alone (mcnode
// lock would keep the terminal and the lock): there it inherits SIGTSTP
// ignored. Off a terminal, --foreground passes SIGINT on, as it does SIGTERM.
func TestE2ELockCommandSignals(t *testing.T) {
	c := newCluster(t, 1, 1)
	for _, fg := range []bool{false, true} {
		args := []string{"lock", "s", "--", "grep", "^SigIgn:", "/proc/self/status"}
		if fg {
			args = append([]string{"lock", "--foreground"}, args[1:]...)
		}
		out, err := c.mcnode(0, args...).Output()
		if err != nil {
			t.Fatalf("mcnode %s: %v: %s", strings.Join(args, " "), err, out)
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(string(out), "SigIgn:")), 16, 64)
		if err != nil {
			t.Fatalf("command's SigIgn line %q: %v", out, err)
		}
		if bit := uint64(1) << (syscall.SIGTSTP - 1); (mask&bit != 0) != fg {
			t.Errorf("mcnode %s: the command's SigIgn %016x; want SIGTSTP (%#x) ignored only with --foreground", strings.Join(args, " "), mask, bit)
		}
	}
	// Started with SIGINT and SIGTSTP ignored (by whoever ran it: a shell
	// without job control ignores SIGINT for `cmd &`), mcnode lock leaves
	// the command those ignores, as exec would have. (Not SIGQUIT's: the Go
	// runtime takes that signal over before mcnode can see it was ignored.)
	out, err := underShell(c.mcnode(0, "lock", "s", "--", "grep", "^SigIgn:", "/proc/self/status"), `trap "" INT TSTP`).Output()
	if err != nil {
		t.Fatalf("mcnode lock with SIGINT and SIGTSTP ignored: %v: %s", err, out)
	}
	mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(string(out), "SigIgn:")), 16, 64)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTSTP} {
		if bit := uint64(1) << (sig - 1); err != nil || mask&bit == 0 {
			t.Errorf("mcnode lock started with %v ignored: the command's SigIgn %q (%v); want it (%#x) still ignored", sig, out, err, bit)
		}
	}

	// Ctrl-Z (here a SIGTSTP to mcnode lock alone) does not stop mcnode
	// lock while it holds the lock: stopped, it could not stop its command
	// when the lease runs out.
	stopDir := t.TempDir()
	started := filepath.Join(stopDir, "started")
	holder := c.background(c.mcnode(0, "lock", "z", "--", "sh", "-c", "echo > "+started+"; sleep 1"))
	waitFile(t, started, "the command under lock started")
	if err := holder.cmd.Process.Signal(syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if st := procState(holder.cmd.Process.Pid); st == "T" {
		_ = holder.cmd.Process.Signal(syscall.SIGCONT)
		t.Errorf("mcnode lock was stopped by SIGTSTP while it held the lock (state %s)", st)
	}
	holder.wantClean(t, "mcnode lock after a SIGTSTP")

	dir := t.TempDir()
	got, ready := filepath.Join(dir, "got"), filepath.Join(dir, "ready")
	script := `trap 'echo INT >> ` + got + `; exit 5' INT; echo > ` + ready + `; while :; do sleep 0.05; done`
	lock := c.background(c.mcnode(0, "lock", "--foreground", "f", "--", "sh", "-c", script))
	waitFile(t, ready, "the command under lock started")
	// No terminal here: the SIGINT comes to mcnode lock alone (a
	// supervisor's kill -INT), and the command must get it.
	if err := lock.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	lock.wantExit(t, 5, "mcnode lock --foreground after SIGINT off a terminal (passed on to the command)")
	if b, err := os.ReadFile(got); err != nil || strings.TrimSpace(string(b)) != "INT" {
		t.Fatalf("the command got %q (%v), want one INT", b, err)
	}
}

// procState is a process's state letter in /proc (T: stopped), or "".
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return ""
}

// A daemon stopped by the operator while it still waits for its group exits
// 0, saying so, rather than failing with "context canceled".
func TestE2ERunStoppedBeforeJoining(t *testing.T) {
	c := newCluster(t, 1, 0)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		// No group answers, and a minute passes before it founds one.
		d := c.background(c.mcnode(0, "run", "--join-timeout", "1m"))
		// The socket is served from before the daemon joins; the signals
		// are caught from before it is.
		waitFile(t, c.socket(0), "the daemon serves its socket")
		if err := d.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		d.wantClean(t, "mcnode run stopped by "+sig.String()+" while joining")
		if out := d.out.String(); !strings.Contains(out, "stopped before joining") || strings.Contains(out, "context canceled") {
			t.Errorf("mcnode run stopped by %v while joining says:\n%s", sig, out)
		}
		if _, err := os.Stat(c.socket(0)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the control socket is left behind after %v: %v", sig, err)
		}
	}
}

// SIGHUP (a closed terminal, a supervisor hanging up) stops a daemon as
// SIGTERM does: it leaves the group, and removes its socket and its
// membership record (left behind, the record would make the next start
// wait for a group that no longer runs).
func TestE2ERunSIGHUPLeaves(t *testing.T) {
	c := newCluster(t, 1, 0)
	// Under nohup (a test run started with SIGHUP ignored) the daemon
	// would inherit the ignore and, rightly, keep it: catch SIGHUP here,
	// so that the daemon starts with the default.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	d := c.background(c.mcnode(0, "run"))
	c.waitMembers(0, 1)
	record := filepath.Join(c.dir, "state0", "e2e.member")
	if _, err := os.Stat(record); err != nil {
		t.Fatalf("no membership record once a member: %v", err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	d.wantClean(t, "mcnode run after SIGHUP")
	if !strings.Contains(d.out.String(), "leaving the group") {
		t.Errorf("mcnode run did not leave the group on SIGHUP:\n%s", d.out)
	}
	for _, p := range []string{c.socket(0), record} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left behind after SIGHUP: %v", p, err)
		}
	}
}

// Ctrl-C while mcnode lock waits withdraws the request and says so (it used
// to print only "context canceled"); the lock goes on to the next waiter.
func TestE2ELockInterruptedWhileWaiting(t *testing.T) {
	c := newCluster(t, 1, 1)
	ready := filepath.Join(t.TempDir(), "ready")
	// Under nohup (a test run started with SIGHUP ignored) the lock
	// clients would inherit the ignore and keep it: catch SIGHUP here, so
	// that they start with the default.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	holder := c.background(c.mcnode(0, "lock", "w", "--", "sh", "-c", "echo > "+ready+"; sleep 8"))
	waitFile(t, ready, "the first holder's command started")
	waiter := c.background(c.mcnode(0, "lock", "w", "--", "true"))
	time.Sleep(300 * time.Millisecond) // queued behind the holder
	if err := waiter.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waiter.wantExit(t, exitNotAcquired, "mcnode lock interrupted while waiting")
	if out := waiter.out.String(); !strings.Contains(out, "interrupted while waiting for lock \"w\"") {
		t.Errorf("mcnode lock interrupted while waiting says:\n%s", out)
	}
	// SIGHUP and SIGQUIT likewise: the one killed it (status 129), the
	// other dumped its goroutines and exited 2 (black-box round).
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT} {
		waiter := c.background(c.mcnode(0, "lock", "w", "--", "true"))
		time.Sleep(300 * time.Millisecond)
		if err := waiter.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		waiter.wantExit(t, exitNotAcquired, "mcnode lock sent "+sig.String()+" while waiting")
		if out := waiter.out.String(); !strings.Contains(out, "interrupted while waiting for lock \"w\"") || strings.Contains(out, "goroutine") {
			t.Errorf("mcnode lock sent %v while waiting says:\n%s", sig, out)
		}
	}
	holder.wantClean(t, "the holder")
	out, err := c.mcnode(0, "lock", "--timeout", "10s", "w", "--", "true").CombinedOutput()
	if err != nil {
		t.Fatalf("the lock after the withdrawn request: %v: %s", err, out)
	}
}

// --nonblock in a group that lost its majority fails within a few seconds,
// saying why, through the daemon and without one (through the daemon it
// waited for ever; without, it said "timed out after 0s").
func TestE2ENonblockWithoutMajority(t *testing.T) {
	c := newCluster(t, 3, 2)
	c.kill(1) // one of two: no majority, and none to remove the dead one
	c.waitStatus(0, "no majority", func(v *statusView) bool { return !v.QuorumHeld })
	for _, tc := range []struct {
		host int // 2 has no daemon
		args []string
		want string
	}{
		{0, []string{"lock", "-n", "x", "--", "true"}, "no answer from the group's server"},
		// Never admitted: a minority admits no one.
		{2, []string{"lock", "-n", "--no-daemon", "x", "--", "true"}, "not admitted to group"},
	} {
		host, args := tc.host, tc.args
		start := time.Now()
		out, err := c.mcnode(host, args...).CombinedOutput()
		took := time.Since(start)
		t.Logf("mcnode %s: %v after %v: %s", strings.Join(args, " "), err, took.Round(time.Millisecond), out)
		var ee interface{ ExitCode() int }
		if !errors.As(err, &ee) || ee.ExitCode() != exitNoGroup {
			t.Errorf("mcnode %s without a majority: %v: %s; want status %d", strings.Join(args, " "), err, out, exitNoGroup)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("mcnode %s without a majority says %q; want %q", strings.Join(args, " "), out, tc.want)
		}
		if took > 15*time.Second {
			t.Errorf("mcnode %s without a majority took %v", strings.Join(args, " "), took)
		}
	}
}

// --nonblock through a stopped daemon gives up, naming the daemon (it
// waited for ever).
func TestE2ENonblockStoppedDaemon(t *testing.T) {
	c := newCluster(t, 1, 1)
	if err := c.daemons[0].Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.daemons[0].Process.Signal(syscall.SIGCONT) }()
	out, err := c.mcnode(0, "lock", "-n", "x", "--", "true").CombinedOutput()
	var ee interface{ ExitCode() int }
	if !errors.As(err, &ee) || ee.ExitCode() != exitNoGroup || !strings.Contains(string(out), "no answer from the daemon") {
		t.Fatalf("mcnode lock -n through a stopped daemon: %v: %s; want status %d naming the daemon", err, out, exitNoGroup)
	}
}

// --timeout through a stopped daemon gives up at the timeout, not a second
// later, and says the daemon did not answer (asked why the lock did not
// come, it said nothing before).
func TestE2ETimeoutStoppedDaemon(t *testing.T) {
	c := newCluster(t, 1, 1)
	if err := c.daemons[0].Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.daemons[0].Process.Signal(syscall.SIGCONT) }()
	start := time.Now()
	out, err := c.mcnode(0, "lock", "--timeout", "1s", "x", "--", "true").CombinedOutput()
	took := time.Since(start)
	var ee interface{ ExitCode() int }
	if !errors.As(err, &ee) || ee.ExitCode() != exitNotAcquired || !strings.Contains(string(out), "did not answer within "+whyTimeout.String()+" either") {
		t.Fatalf("mcnode lock --timeout 1s through a stopped daemon: %v: %s; want status %d saying the daemon did not answer", err, out, exitNotAcquired)
	}
	// The process's own start is in it too: a loose bound, well below the
	// 2 s it took when the question could wait a second.
	if took > time.Second+whyTimeout+500*time.Millisecond {
		t.Errorf("mcnode lock --timeout 1s through a stopped daemon took %v", took)
	}
}

// Two daemons of one group on one host with one state directory (each its
// own socket) would remove each other's membership record: the second is
// refused, naming the first, and the first serves on. Once the first is
// killed, the kernel drops its claim and a daemon starts there again (and
// finds the record the killed one left: it waits for the group).
func TestE2ERunStateDirectoryShared(t *testing.T) {
	c := newCluster(t, 1, 1)
	same := c.background(c.mcnode(0, "run"))
	same.wantExit(t, 1, "the same daemon started twice")
	if out := same.out.String(); !strings.Contains(out, "a daemon for this group already serves "+c.socket(0)) {
		t.Errorf("the same daemon started twice says:\n%s", out)
	}
	other := filepath.Join(c.dir, "other.sock")
	second := c.background(c.mcnode(0, "run", "--socket", other))
	second.wantExit(t, 1, "a second daemon sharing the state directory")
	out := second.out.String()
	if !strings.Contains(out, "another daemon of this group (process "+strconv.Itoa(c.daemons[0].Process.Pid)+" on ") || !strings.Contains(out, "--state-dir") {
		t.Errorf("the second daemon's refusal does not name the first or the remedy:\n%s", out)
	}
	if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused daemon left its socket: %v", err)
	}
	c.waitMembers(0, 1) // the first serves on
	if _, err := os.Stat(filepath.Join(c.dir, "state0", "e2e.member")); err != nil {
		t.Fatalf("the first daemon's membership record is gone: %v", err)
	}
	c.kill(0)
	again := c.background(c.mcnode(0, "run", "--socket", other, "--join-timeout", "1m"))
	waitFile(t, other, "the daemon after the killed one serves its socket")
	v, err := daemonStatus(other, "")
	if err == nil {
		t.Fatalf("the restarted daemon is a member at once (%+v); it should wait for the group", v)
	}
	if !strings.Contains(err.Error(), "this host was a member") {
		t.Errorf("the restarted daemon's status: %v, want it waiting for the group", err)
	}
	if err := again.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	again.wantClean(t, "the restarted daemon, stopped while waiting")
}

// A daemon stopped and started again at once, on the same socket and state
// directory, takes over once the old one has left: the old one stops
// serving its socket as it begins to leave, and the new one waits for the
// state directory meanwhile. (It used to find the socket still served, and
// exit with "already serves".) The old one's leave is held up here, as on a
// slow network: the other members are stopped, so the leave waits for its
// timeout.
func TestE2ERunRestartedAtOnce(t *testing.T) {
	c := newCluster(t, 3, 3)
	old, others := c.daemons[0], c.daemons[1:]
	for _, d := range others {
		if err := d.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Process.Signal(syscall.SIGCONT) })
	}
	if err := old.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- old.Wait() }()
	time.Sleep(200 * time.Millisecond) // the old one is leaving, unanswered
	select {
	case err := <-exited:
		t.Fatalf("the old daemon exited before its leave could time out: %v", err)
	default:
	}
	c.startDaemon(0)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the old daemon, stopped by SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the old daemon did not exit within 10 s")
	}
	for _, d := range others {
		if err := d.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	// The others remove the old incarnation after its lease, and admit
	// the new one.
	v := c.waitStatus(0, "the new daemon is a member of the group of three", func(v *statusView) bool { return v.Self != 0 && len(v.Members) == 3 })
	if b, _ := os.ReadFile(filepath.Join(c.dir, "daemon0.log")); !strings.Contains(string(b), "waiting in case it is leaving") {
		t.Errorf("the new daemon did not wait for the old one (members %+v):\n%s", v.Members, b)
	}
}

// SIGTERM to the daemon through which a command holds a lock: the daemon
// stops the command before it lets the lock go. It left the group at
// once, and the next holder entered 2 to 20 ms after the signal while the
// command, busy with its SIGTERM, still wrote for 100 ms (found by a
// black-box round). The command here writes 60 ms after its SIGTERM, well
// within the grace before its SIGKILL; the waiter must enter after that.
func TestE2EStoppedDaemonStopsTheHolderFirst(t *testing.T) {
	for _, mode := range []string{"multicast", "quorum"} {
		t.Run(mode, func(t *testing.T) {
			const holder, waiter = 1, 2
			var c *cluster
			if mode == "quorum" {
				c = newQuorumCluster(t, 3, "maekawa", "majority")
			} else {
				c = newCluster(t, 3, 3)
			}
			dir := c.dir
			client := c.background(c.mcnode(holder, "lock", "r", "--", "sh", "-c",
				`trap 'sleep 0.06; date +%s%N > "$1/last"; exit 0' TERM; echo > "$1/started"; while :; do sleep 0.01; done`, "sh", dir))
			waitFile(t, filepath.Join(dir, "started"), "the holder's command started")
			wait := c.background(c.mcnode(waiter, "lock", "--timeout", "30s", "r", "--", "sh", "-c", `date +%s%N > "$1/entered"`, "sh", dir))
			time.Sleep(500 * time.Millisecond) // the waiter asks
			if err := c.daemons[holder].Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := <-wait.done; err != nil {
				t.Fatalf("the waiter: %v: %s", err, wait.out)
			}
			client.wantExit(t, exitLost, "the holder's lock client, its daemon stopping,")
			if !strings.Contains(client.out.String(), "the daemon is stopping") {
				t.Errorf("the holder's lock client does not say why it lost the lock: %s", client.out)
			}
			last, entered := parseUints(t, filepath.Join(dir, "last")), parseUints(t, filepath.Join(dir, "entered"))
			if len(last) != 1 || len(entered) != 1 {
				t.Fatalf("times: last %v, entered %v", last, entered)
			}
			if entered[0] <= last[0] {
				t.Fatalf("the waiter entered %v before the holder's command last wrote", time.Duration(last[0]-entered[0]))
			}
			t.Logf("the waiter entered %v after the holder's command last wrote", time.Duration(entered[0]-last[0]).Round(time.Millisecond))
			if err := c.daemons[holder].Wait(); err != nil {
				t.Errorf("the stopped daemon: %v", err)
			}
		})
	}
}

// A `mcnode lock` stopped (SIGSTOP) for longer than the lease while its
// command runs, through a daemon that renews the lock all along: resumed,
// it reads the renewals that waited in its socket before it judges the
// lease, and lets the command finish. It killed the command at once and
// exited 3, "the lease ran out with no renewal" (black-box round).
func TestE2EStoppedLockClientResumes(t *testing.T) {
	c := newCluster(t, 1, 1)
	ready := filepath.Join(c.dir, "started")
	client := c.background(c.mcnode(0, "lock", "x", "--", "sh", "-c", `touch "$1"; sleep 4`, "sh", ready))
	waitFile(t, ready, "the command started")
	if err := client.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // past the 1.5 s lease
	if err := client.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	client.wantClean(t, "mcnode lock, stopped and resumed while its daemon renewed the lock,")
}

// A `mcnode lock` starved steadily (stopped and continued again and again,
// as CPU throttling would) while its daemon is stopped still stops its
// command before another host enters: skipping each late watchdog tick to
// read renewals first, it skipped them all, and the command wrote on for
// seconds after the next holder entered (review).
func TestE2EStarvedLockClientStopsItsCommand(t *testing.T) {
	c := newCluster(t, 3, 3)
	dir := c.dir
	client := c.background(c.mcnode(0, "lock", "r", "--", "sh", "-c",
		`echo > "$1/started"; while :; do date +%s%N >> "$1/writes"; sleep 0.02; done`, "sh", dir))
	waitFile(t, filepath.Join(dir, "started"), "the holder's command started")
	time.Sleep(300 * time.Millisecond)
	if err := c.daemons[0].Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.daemons[0].Process.Signal(syscall.SIGCONT) })
	wait := c.background(c.mcnode(1, "lock", "--timeout", "30s", "r", "--", "sh", "-c", `date +%s%N > "$1/entered"`, "sh", dir))
	for end := time.Now().Add(7 * time.Second); time.Now().Before(end); {
		_ = syscall.Kill(client.cmd.Process.Pid, syscall.SIGSTOP)
		time.Sleep(150 * time.Millisecond)
		_ = syscall.Kill(client.cmd.Process.Pid, syscall.SIGCONT)
		time.Sleep(time.Millisecond)
	}
	if err := <-wait.done; err != nil {
		t.Fatalf("the waiter: %v: %s", err, wait.out)
	}
	time.Sleep(200 * time.Millisecond) // a write that raced the entry lands
	writes, entered := parseUints(t, filepath.Join(dir, "writes")), parseUints(t, filepath.Join(dir, "entered"))
	if len(writes) == 0 || len(entered) != 1 {
		t.Fatalf("writes %d, entered %v", len(writes), entered)
	}
	if last := writes[len(writes)-1]; last >= entered[0] {
		t.Fatalf("the starved holder's command wrote %v after the waiter entered", time.Duration(last-entered[0]))
	}
}

// A second SIGTERM ends a stopping daemon at once: it waited out its lock
// clients (up to 2 s) and its leave (up to 3 s) whatever the operator sent
// (review).
func TestE2ESecondSignalEndsAStoppingDaemon(t *testing.T) {
	c := newCluster(t, 1, 1)
	ready := filepath.Join(c.dir, "held")
	client := c.background(c.mcnode(0, "lock", "x", "--", "sh", "-c", `touch "$1"; sleep 30`, "sh", ready))
	waitFile(t, ready, "the lock is held")
	// Stopped, the client never gives its lock back: the daemon waits.
	if err := client.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.cmd.Process.Signal(syscall.SIGCONT) })
	d := c.daemons[0]
	if err := d.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := d.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = d.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("the stopping daemon did not end within 1 s of a second SIGTERM")
	}
}
