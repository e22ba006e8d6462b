package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/boottime"
	"github.com/mcnode/mcnode/quorumfallback/node"
	"github.com/mcnode/mcnode/wire"
)

func lockCommand() *cli.Command {
	return &cli.Command{
		Name:      "lock",
		Usage:     "take a lock, run a command while holding it, release it",
		ArgsUsage: "NAME -- COMMAND [ARGS...]",
		Description: "Waits for the lock NAME in the group's FIFO order, runs COMMAND with\n" +
			"MCNODE_LOCK, MCNODE_TOKEN (the fencing token) and MCNODE_GROUP in its environment,\n" +
			"then releases the lock, like flock(1) across hosts. It goes through the local\n" +
			"`mcnode run` daemon if one serves the group, else joins the group for the duration\n" +
			"(it does not found a group unless --found is given), as an observer where the group\n" +
			"has three voters: a member that does not vote, so that lock commands dying together\n" +
			"never cost the group its majority.\n\n" +
			fmt.Sprintf("NAME is 1 to %d bytes of UTF-8. Flags go before NAME: what follows NAME is the\n", maxLockName) +
			"command (a COMMAND that starts with \"-\" goes after \"--\").\n\n" +
			"COMMAND runs in its own process group (--foreground keeps it in the terminal's).\n" +
			"SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to mcnode lock are passed on to it (with\n" +
			"--foreground in a terminal's foreground, SIGINT and SIGQUIT are not: the terminal\n" +
			"sends its Ctrl-C and Ctrl-\\ to COMMAND too). Ctrl-Z does not stop mcnode lock while\n" +
			"it holds the lock; with --foreground it stops neither (COMMAND inherits it ignored).\n" +
			"If the lock is lost while it runs, the process group gets SIGTERM, then SIGKILL\n" +
			"after half the group's lease margin (at least 40 ms, at most 1 s), before the\n" +
			"group can hand the lock on.\n" +
			"Through a daemon, COMMAND inherits the lock's connection: if mcnode lock is\n" +
			"killed, the lock is held until COMMAND and every process it started have exited,\n" +
			"as with flock(1). Without a daemon, COMMAND is killed if mcnode lock is, and so\n" +
			"is the rest of its process group, even on a SIGKILL of mcnode lock: a helper,\n" +
			"mcnode-lock-guard, outlives mcnode lock to kill it (with --foreground, only\n" +
			"COMMAND itself is killed).\n\n" +
			"Exit status: COMMAND's own; 1 if the lock was not acquired (--timeout ran out,\n" +
			"or held elsewhere with --nonblock); 2 for usage errors; 3 if the lock was lost\n" +
			"while COMMAND ran; 4 if there was no group to ask (no daemon, and no member\n" +
			"answered or no --interface to ask one on; a daemon of another group; or with\n" +
			"--nonblock a daemon not a member of its group yet, a group without a majority\n" +
			"or a daemon that does not answer);\n" +
			"126/127 if COMMAND cannot be run or found.\n\n" +
			"In quorum mode (--mode quorum) the lock always goes through the local daemon\n" +
			"and is granted in the protocol's order (request timestamps, or FIFO per arbiter\n" +
			"for kakugawa); --nonblock means \"not granted within 200 ms\" (the protocols\n" +
			"cannot ask without queueing; a request given up on is released once granted);\n" +
			"a lost lock's COMMAND gets SIGTERM and SIGKILL as above, after half the quorum\n" +
			"node's lease margin (40 ms where it has none).",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "timeout", Aliases: []string{"w"}, EnvVars: []string{"MCNODE_LOCK_TIMEOUT"},
				Usage: "give up waiting for the lock after this long (0: wait forever); asking a stopped daemon why may add up to " + whyTimeout.String()},
			&cli.BoolFlag{Name: "nonblock", Aliases: []string{"n"},
				Usage: "fail at once if another client holds or waits for the lock (with no answer from the group's server, after a few seconds)"},
			&cli.BoolFlag{Name: "no-daemon", Usage: "join the group directly even if a local daemon runs"},
			&cli.BoolFlag{Name: "found", Usage: "without a daemon: found the group if no member answers (only safe where multicast is known to work)"},
			&cli.BoolFlag{Name: "foreground", Usage: "run COMMAND in the terminal's process group (for interactive commands); only COMMAND itself is signalled if the lock is lost"},
		},
		Action: lockAction,
	}
}

// held is a lock held either through the daemon or by joining directly.
type held struct {
	token  uint64
	margin time.Duration // the group's lease margin
	conn   *os.File      // the daemon connection, for COMMAND to inherit
	lost   <-chan struct{}
	// released is closed when the daemon released the lock on a request
	// that did not come from mcnode lock: the command's, through the
	// connection it inherited. The command runs on, without the lock.
	released <-chan struct{}
	why      func() string
	// group is the group the lock is held in, if a daemon said so: the
	// daemon's, which --group need not name.
	group   string
	release func()
	// expires returns the lease deadline on CLOCK_BOOTTIME, as last heard
	// (0: leases do not expire in this mode).
	expires func() time.Duration
}

func lockAction(c *cli.Context) error {
	args := c.Args().Slice()
	if len(args) < 2 {
		return usage("usage: mcnode lock NAME -- COMMAND [ARGS...]")
	}
	name, argv := args[0], args[1:]
	if err := checkLockName(name); err != nil {
		return err
	}
	switch {
	case argv[0] == "--":
		argv = argv[1:]
	case strings.HasPrefix(argv[0], "-"):
		// Flags stop at NAME, so this would be taken for the command, and
		// run (and fail) only once the lock had been waited for.
		return usage("%q follows the lock name %q: flags go before NAME (mcnode lock [FLAGS] NAME -- COMMAND); a COMMAND that starts with \"-\" goes after \"--\"", argv[0], name)
	}
	if len(argv) == 0 {
		return usage("no COMMAND to run under lock %q", name)
	}
	if t := c.Duration("timeout"); t < 0 {
		return usage("--timeout %v is negative: give how long to wait for the lock, or 0 to wait as long as it takes", t)
	}
	log, err := logger(c)
	if err != nil {
		return err
	}
	// SIGHUP and SIGQUIT too: a waiting lock killed by the one, or dumping
	// its goroutines and exiting 2 (a usage error's status) on the other,
	// withdrew nothing and said nothing useful.
	ctx, stop := signal.NotifyContext(context.Background(), catchable(os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)...)
	defer stop()
	// A closed stderr (`mcnode lock ... 2>&1 | head -c 1`) must not kill
	// mcnode lock with SIGPIPE at its next log line, losing the command's
	// status: caught, the write fails instead. (Caught, not ignored: an
	// ignored signal stays ignored in the command.)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	holdStop(c.Bool("foreground"))
	actx := ctx
	if t := c.Duration("timeout"); t > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	waited := stillWaitingNote(c, name)
	h, err := acquireLock(c, actx, name, log)
	waited()
	var ee *exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		return err
	case errors.Is(err, mcnode.ErrLocked) || errors.Is(err, group.ErrLocked):
		return &exitError{code: exitNotAcquired, err: fmt.Errorf("lock %q is held or waited for by another client (--nonblock)", name)}
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return &exitError{code: exitNotAcquired, err: fmt.Errorf("interrupted while waiting for lock %q: the request is withdrawn", name)}
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return &exitError{code: exitNotAcquired, err: fmt.Errorf("timed out after %v waiting for lock %q%s", c.Duration("timeout"), name, whyWaited(c, err))}
	default:
		// No group, or none that can answer: the lock may well be free.
		return &exitError{code: exitNoGroup, err: err}
	}
	defer h.release()
	return runLocked(c, name, argv, h, log)
}

// daemonModeOf returns the mode this host's daemon of the group last
// started in, as it recorded it (recordMode), and the file; "" if none.
func daemonModeOf(c *cli.Context) (mode, file string) {
	dir, err := stateDir(c)
	if err != nil || dir == "" {
		return "", ""
	}
	file = filepath.Join(dir, groupFileName(c.String("group"))+".mode")
	b, err := os.ReadFile(file)
	if err != nil {
		return "", file
	}
	return strings.TrimSpace(string(b)), file
}

// holdStop keeps Ctrl-Z (SIGTSTP) from stopping mcnode lock from before it
// asks for the lock until it exits, after the release: stopped, it could
// not stop the command when the lease runs out, and stopped while it waits
// it could be granted the lock and hold it, doing nothing, for as long as
// it stays stopped.
//
// In the command's own process group (the default) the terminal's stop
// does not reach the command, and mcnode lock catches and drops the signal
// rather than ignore it: an ignored signal stays ignored across exec, and
// the command must be able to be stopped as usual; a caught one is reset
// to the default in it. With --foreground the command shares the
// terminal's process group, and a Ctrl-Z would stop it alone while mcnode
// lock, not stopped, kept the terminal from the shell and the lock held:
// there the signal is ignored, and the command inherits that, as before.
// Started with the signal ignored already, mcnode lock leaves it so: it
// cannot be stopped by it, and the command inherits what its caller chose.
func holdStop(foreground bool) {
	if foreground || inheritedIgnore(syscall.SIGTSTP) {
		signal.Ignore(syscall.SIGTSTP)
		return
	}
	tstp := make(chan os.Signal, 1) // nothing reads it: a full channel drops the rest
	signal.Notify(tstp, syscall.SIGTSTP)
}

// ignoredAtStart is the set of signals this process started with ignored,
// as the kernel says (SigIgn in /proc/self/status), read before anything
// here catches one. A caller that ignores SIGINT (a shell running
// `mcnode lock ... &` without job control) or SIGTSTP means the command to
// ignore it too; catching it here would reset it to the default in the
// command, as exec does for every caught signal. signal.Ignored cannot tell
// for SIGTSTP: the Go runtime does not record an inherited ignore of a
// signal it leaves alone until asked. (SIGQUIT's and SIGTERM's cannot be
// kept: the runtime installs its own handlers for them as it starts.)
var ignoredAtStart = sigIgnMask()

// sigIgnMask reads the signals ignored now, one bit per signal number
// (bit 0 for signal 1).
func sigIgnMask() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if hex, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				return 0
			}
			return mask
		}
	}
	return 0
}

// inheritedIgnore reports whether sig was ignored when this process started.
func inheritedIgnore(sig syscall.Signal) bool { return ignoredAtStart&(1<<(sig-1)) != 0 }

// catchable is sigs without those this process started with ignored, which
// it leaves ignored, for itself and its command. SIGTERM stays (the Go
// runtime catches it from the start anyway): given with it, the list is
// never empty, which to signal.Notify would mean every signal.
func catchable(sigs ...os.Signal) []os.Signal {
	return slices.DeleteFunc(sigs, func(s os.Signal) bool {
		ss, ok := s.(syscall.Signal)
		return ok && ss != syscall.SIGTERM && inheritedIgnore(ss)
	})
}

// inTerminalForeground reports whether this process's group is, now, the
// foreground process group of its controlling terminal: then the terminal's
// Ctrl-C and Ctrl-\ reach every process of the group by themselves. It asks
// the kernel for the controlling terminal's group (tpgid in /proc/self/stat),
// whatever stdin is (a pipe, /dev/null, another terminal), and is asked at
// each signal, since a job can be moved to the foreground (fg) meanwhile.
func inTerminalForeground() bool {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ppid pgrp session tty_nr tpgid ...: comm may hold
	// spaces and parentheses, so count from the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 6 {
		return false
	}
	tpgid, err := strconv.Atoi(f[5])
	return err == nil && tpgid > 0 && tpgid == unix.Getpgrp()
}

// maxLockName is the longest lock name, in bytes: the wire format's limit on
// a resource name in multicast mode and the quorum node's in quorum mode
// (one limit today; the smaller, should they part). A longer name could not
// be sent to the group at all.
var maxLockName = min(wire.DefaultLimits().MaxName, node.MaxName)

// checkLockName refuses, as a usage error, a lock name the group would
// refuse: before the daemon is asked or the group joined, so that the
// message speaks of the argument rather than of a wire field.
func checkLockName(name string) error {
	switch {
	case name == "":
		return usage("the lock name is empty: name the lock, 1 to %d bytes (mcnode lock NAME -- COMMAND)", maxLockName)
	case len(name) > maxLockName:
		return usage("lock name %.40q... is %d bytes, longer than the limit of %d bytes: choose a shorter name", name, len(name), maxLockName)
	case !utf8.ValidString(name):
		return usage("lock name %q is not valid UTF-8: every member must be able to read it", name)
	}
	return nil
}

// whyWaited explains a wait for a lock that timed out, when the reason is
// that this node reaches no majority of the group: the error says so when
// the node ran in this process, the daemon's status otherwise.
func whyWaited(c *cli.Context, err error) string {
	var nq *group.NoQuorumError
	if errors.As(err, &nq) {
		return ": " + nq.Quorum.String()
	}
	if errors.Is(err, errStillJoining) {
		return fmt.Sprintf(": not yet a member of group %s (no member has answered, or the group has not admitted this node yet)", strconv.Quote(c.String("group")))
	}
	path, perr := clientSocketPath(c)
	if perr != nil {
		return ""
	}
	d, derr := dialDaemon(path)
	if derr != nil {
		return ""
	}
	defer d.Close()
	// The daemon may be the reason for the timeout (stopped, or stuck): the
	// explanation must not outwait the timeout the user gave by much. A
	// running daemon answers within a millisecond.
	_ = d.conn.SetDeadline(time.Now().Add(whyTimeout))
	if d.send(request{Op: "status"}) != nil {
		return ""
	}
	r, rerr := d.receive()
	if errors.Is(rerr, os.ErrDeadlineExceeded) {
		return fmt.Sprintf(": the daemon at %s did not answer within %v either: is it stopped (SIGSTOP, Ctrl-Z) or hung?", path, whyTimeout)
	}
	if rerr == nil && !r.OK && r.Error != "" {
		return ": " + r.Error // not a member yet, and why
	}
	if rerr != nil || r.Status == nil || r.Status.QuorumHeld {
		return "" // held by others, most likely
	}
	// Either mode: in quorum mode, the links down (it said nothing).
	return ": " + r.Status.QuorumText
}

// stillWaitingNote says once on stderr, stillWaitingAfter into a wait,
// why the lock is not granted if the daemon knows a reason other than its
// holders (not a member yet, no majority, links down): a lock without
// --timeout waited silently for as long as that lasted (black-box round).
// It returns the function that ends the wait.
func stillWaitingNote(c *cli.Context, name string) (done func()) {
	end := make(chan struct{})
	var mu sync.Mutex // held while the note is written
	ended := false
	go func() {
		select {
		case <-end:
			return
		case <-time.After(stillWaitingAfter):
		}
		why := whyWaited(c, nil)
		mu.Lock()
		defer mu.Unlock()
		if why != "" && !ended { // granted meanwhile: nothing to say
			fmt.Fprintf(c.App.ErrWriter, "mcnode lock: still waiting for lock %q after %v%s\n", name, stillWaitingAfter, why)
		}
	}()
	return func() {
		// The note is never written after the wait, which does not wait
		// for the daemon's answer (review: up to 1.2 s).
		mu.Lock()
		ended = true
		mu.Unlock()
		close(end)
	}
}

// stillWaitingAfter is when stillWaitingNote speaks.
const stillWaitingAfter = 5 * time.Second

// whyTimeout bounds the question whyWaited asks the daemon once a lock's
// --timeout has run out: how much later than that mcnode lock may give up.
const whyTimeout = 200 * time.Millisecond

// errStillJoining: the lock's time ran out while this node, without a
// daemon, still joined the group.
var errStillJoining = errors.New("still joining the group")

// acquireLock takes the lock through the daemon, or else by joining.
func acquireLock(c *cli.Context, ctx context.Context, name string, log zerolog.Logger) (*held, error) {
	// A bad --mode is refused whether a daemon answers or not (through one
	// it was ignored, and the command ran).
	if m := c.String("mode"); m != modeMulticast && m != modeQuorum {
		return nil, usage("--mode %q: want multicast or quorum", m)
	}
	noDaemonAt := ""
	if !c.Bool("no-daemon") {
		path, err := clientSocketPath(c)
		if err != nil {
			return nil, err
		}
		d, err := dialDaemon(path)
		switch {
		case err == nil:
			d.group = askedGroup(c)
			log.Debug().Str("socket", path).Msg("locking through the local daemon")
			return lockViaDaemon(ctx, d, name, c.Bool("nonblock"))
		case errors.Is(err, errUnsafeSocketDir):
			return nil, err
		}
		noDaemonAt = path
	}
	if m, err := mode(c); err != nil {
		return nil, err
	} else if m == modeQuorum {
		if c.Bool("no-daemon") {
			return nil, usage("--no-daemon does not work in quorum mode: its locks go through `mcnode run --mode quorum` (the quorums are fixed, so a node cannot come and go for one command)")
		}
		return nil, needDaemon(c, "lock")
	}
	cfg, err := groupConfig(c, log)
	if err != nil {
		return nil, noDaemonNoInterface(c, err, exitNoGroup)
	}
	// No daemon answers (stopped, restarting, or dead). Had this host's
	// run in quorum mode, joining the multicast group instead would take a
	// lock its holders do not exclude.
	if mode, file := daemonModeOf(c); noDaemonAt != "" && mode == modeQuorum {
		return nil, &exitError{code: exitNoGroup, err: fmt.Errorf("no daemon answers at %s, and this host's daemon of the group runs in quorum mode (%s says so): its locks go through it, not the multicast group; set MCNODE_MODE=quorum for this host's commands (or remove %s if the group no longer runs in quorum mode here)", noDaemonAt, file, file)}
	}
	// Founding a group for one lock is only safe if multicast is known to
	// work: where it does not, every host would found its own group and all
	// of them would "hold" the lock.
	cfg.Bootstrap = c.Bool("found")
	// A member for one command does not vote where the group has voters
	// enough: a host running many such commands that dies with them must
	// not take the group's majority with it.
	cfg.Observer = true
	// A group that answered is waited for within --timeout: a takeover
	// holds newcomers back for up to a lease.
	cfg.NoGroupAfter = 3 * cfg.JoinTimeout
	jctx := ctx
	if c.Bool("nonblock") {
		// Not waiting means not waiting for admission either: a takeover's
		// wait is about a lease, a minority group never admits.
		var cancel context.CancelFunc
		jctx, cancel = context.WithTimeout(ctx, cfg.NoGroupAfter+2*cfg.LeaseTimeout)
		defer cancel()
	}
	g, err := group.Join(jctx, cfg)
	// A --timeout shorter than NoGroupAfter that ends with no member heard
	// means no group (exit 4), not a lock held elsewhere (exit 1).
	if err != nil && ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && errors.Is(err, group.ErrNoGroup) && !cfg.Bootstrap {
		return nil, &exitError{code: exitNoGroup, err: fmt.Errorf("no member of group %q answered on %s via %s within --timeout %v: run `mcnode run` on the hosts that share locks (see the README); --found starts the group here, safe only if no member runs anywhere (a second group of that name would not exclude the first one's holders)", cfg.Name, cfg.Address, cfg.Interface, c.Duration("timeout"))}
	}
	if err != nil && c.Bool("nonblock") && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil, &exitError{code: exitNoGroup, err: fmt.Errorf("not admitted to group %q within %v, and --nonblock waits no longer: %w", cfg.Name, cfg.NoGroupAfter+2*cfg.LeaseTimeout, err)}
	}
	if err != nil && ctx.Err() != nil {
		// Out of time before this node was a member: the lock was not
		// even asked for, and nobody need hold it (whyWaited).
		return nil, fmt.Errorf("%w: %w", errStillJoining, err)
	}
	if err != nil {
		if errors.Is(err, group.ErrNoGroup) {
			return nil, fmt.Errorf("no member of group %q answered on %s via %s: run `mcnode run` on the hosts that share locks (see the README); --found starts the group here, safe only if no member runs anywhere (a second group of that name would not exclude the first one's holders)", cfg.Name, cfg.Address, cfg.Interface)
		}
		return nil, err
	}
	leave := func() {
		lctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		defer cancel()
		_ = g.Leave(lctx)
	}
	acquire, actx := g.Acquire, ctx
	if c.Bool("nonblock") {
		acquire = g.TryAcquire
		// The server's answer is all --nonblock waits for, and none
		// comes while this node reaches no majority (as in the daemon).
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, tryTimeout)
		defer cancel()
	}
	l, err := acquire(actx, name)
	if err != nil && errors.Is(err, group.ErrNoAnswer) && ctx.Err() == nil {
		// TryAcquire gave up first: this node reaches no majority, or its
		// own bound passed. The error says which.
		leave()
		return nil, &exitError{code: exitNoGroup, err: fmt.Errorf("lock %q: %s", name, strings.TrimPrefix(err.Error(), "group: "))}
	}
	if err != nil && actx.Err() != nil && ctx.Err() == nil {
		leave()
		return nil, &exitError{code: exitNoGroup, err: fmt.Errorf("no answer from the group's server within %v for lock %q%s", tryTimeout, name, whyWaited(c, err))}
	}
	if err != nil {
		leave()
		return nil, err
	}
	st, _ := g.Status()
	return &held{
		token: l.Token(), lost: l.Lost(), margin: st.LeaseMargin,
		why:     func() string { return l.Err().Error() },
		release: func() { _ = l.Release(); leave() },
		expires: func() time.Duration { return time.Duration(l.Expires().UnixNano()) },
	}, nil
}

func lockViaDaemon(ctx context.Context, d *daemonClient, name string, try bool) (*held, error) {
	if err := d.send(request{Op: "lock", Name: name, Try: try}); err != nil {
		d.Close()
		return nil, err
	}
	got := make(chan response, 1)
	fail := make(chan error, 1)
	go func() {
		r, err := d.receive()
		if err != nil {
			fail <- err
			return
		}
		got <- r
	}()
	var tryEnd <-chan time.Time
	if try {
		// The daemon answers a --nonblock request within tryTimeout; one
		// that does not is stopped or hung.
		t := time.NewTimer(tryTimeout + 2*time.Second)
		defer t.Stop()
		tryEnd = t.C
	}
	var r response
	select {
	case r = <-got:
	case err := <-fail:
		d.Close()
		return nil, fmt.Errorf("daemon: %w", err)
	case <-ctx.Done():
		d.Close() // withdraws the request
		return nil, ctx.Err()
	case <-tryEnd:
		d.Close()
		return nil, &exitError{code: exitNoGroup, err: fmt.Errorf("no answer from the daemon within %v for lock %q (--nonblock): is it stopped or hung?", tryTimeout+2*time.Second, name)}
	}
	switch {
	case r.Locked:
		d.Close()
		return nil, mcnode.ErrLocked
	case !r.OK:
		d.Close()
		return nil, fmt.Errorf("daemon: %s", r.Error)
	}
	var conn *os.File
	if uc, ok := d.conn.(*net.UnixConn); ok {
		conn, _ = uc.File() // a duplicate, for COMMAND to inherit
	}
	lost, released := make(chan struct{}), make(chan struct{})
	var why atomic.Value
	why.Store("the daemon went away")
	var expires atomic.Int64
	expires.Store(r.Expires)
	go func() {
		// The daemon says nothing more but lease renewals, unless the lock
		// is lost or released on request; an error here means the daemon
		// (and with it the lock) is gone.
		for {
			r, err := d.receive()
			switch {
			case err != nil:
			case r.Released:
				close(released)
				return
			case r.Lost != "":
				why.Store(r.Lost)
			default:
				if r.Expires > 0 {
					expires.Store(r.Expires)
				}
				continue
			}
			close(lost)
			return
		}
	}()
	return &held{
		token: r.Token, lost: lost, released: released, why: func() string { return why.Load().(string) }, conn: conn, group: r.Group,
		margin:  time.Duration(r.Margin) * time.Millisecond,
		expires: func() time.Duration { return time.Duration(expires.Load()) },
		release: func() {
			_ = d.send(request{Op: "release"})
			// A read of the connection in the kernel (see runLocked)
			// would hold Close until the daemon writes, and a stopped
			// daemon never does: exiting closes the connection anyway.
			closed := make(chan struct{})
			go func() { d.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(time.Second):
			}
		},
	}, nil
}

// runLocked runs the command while the lock is held and returns its status.
func runLocked(c *cli.Context, name string, argv []string, h *held, log zerolog.Logger) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"MCNODE_LOCK="+name,
		"MCNODE_TOKEN="+strconv.FormatUint(h.token, 10),
		"MCNODE_GROUP="+cmp.Or(h.group, c.String("group")),
	)
	foreground := c.Bool("foreground")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: !foreground}
	if h.conn != nil {
		// The command holds the lock's connection too: the daemon releases
		// only when every copy is closed, so killing mcnode lock does not
		// free the lock under a command still at work (flock(1) semantics).
		cmd.ExtraFiles = []*os.File{h.conn}
	} else {
		// Without a daemon the lock dies with mcnode lock; so does COMMAND.
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	// What COMMAND starts does not get Pdeathsig: the guard kills its
	// process group, should mcnode lock die (guard.go). With --foreground
	// that group is the terminal's job, which is not the guard's to kill.
	var guard *lockGuard
	if h.conn == nil && !foreground {
		var err error
		if guard, err = startGuard(name, c.String("log-format"), log); err != nil {
			// The lock is held already, and the command is guarded as
			// before (it dies with mcnode lock); only what it starts is
			// not. Refusing to run it would turn a host where the guard
			// cannot run (no /proc, no exec) into one where no lock works.
			log.Warn().Err(err).Str("lock", name).Msg("no guard: if mcnode lock is killed, what the command started outlives the lock")
		}
	}
	err := cmd.Start()
	if h.conn != nil {
		// Start put the connection's file description in blocking mode
		// (os.File.Fd does), and the descriptor this process reads the
		// daemon's renewals from shares it: set it back, or that read
		// would block in the kernel, where closing the connection cannot
		// wake it.
		_ = syscall.SetNonblock(int(h.conn.Fd()), true)
		h.conn.Close()
	}
	if err != nil {
		guard.standDown()
		code := exitNotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return &exitError{code: code, err: err}
	}
	// send reaches the command's whole process group, unless it runs in the
	// foreground one.
	send := func(s syscall.Signal) {
		if foreground {
			_ = cmd.Process.Signal(s)
		} else {
			_ = syscall.Kill(-cmd.Process.Pid, s)
		}
	}
	guard.arm(cmd.Process.Pid) // the process group's id (unless foreground, with no guard)
	log.Debug().Str("lock", name).Uint64("token", h.token).Int("pid", cmd.Process.Pid).Msg("running under lock")
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, catchable(os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)...)
	defer signal.Stop(sigs)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var killAt <-chan time.Time
	lost, expired, termed := false, false, false
	// The watchdog: the lease runs out at a deadline on CLOCK_BOOTTIME,
	// which renewals push back. If they stop coming (the daemon is stopped
	// or hung, and could not say the lock is lost), the command gets
	// SIGTERM a grace before the deadline and SIGKILL at it: the group may
	// hand the lock on only a lease margin after it.
	watch := time.NewTicker(watchdogInterval)
	defer watch.Stop()
	grace := min(max(h.margin/2, 2*watchdogInterval), time.Second)
	lastTick, skipped := boottime.Now(), false
	for {
		select {
		case s := <-sigs:
			ss, ok := s.(syscall.Signal)
			if !ok || foreground && (ss == syscall.SIGINT || ss == syscall.SIGQUIT) && inTerminalForeground() {
				// The command got the terminal's Ctrl-C or Ctrl-\
				// itself, as mcnode lock did: passed on, it would get
				// it twice. (A SIGTERM comes to mcnode lock alone, and
				// is passed on; so is a SIGINT off a terminal.)
				continue
			}
			send(ss) // the command decides; we wait for it
		case <-h.released:
			// The command released the lock itself (on descriptor 3),
			// as mcnode lock would have: it runs on without it, and
			// nothing is left to lose or to expire.
			log.Info().Str("lock", name).Msg("the command released the lock; waiting for it to exit")
			h.released, h.lost, h.expires = nil, nil, nil
		case <-h.lost:
			lost = true
			h.lost = nil
			if termed {
				continue
			}
			// The group may hand the lock on one lease margin after this
			// node's lease ran out: stop the work well before.
			termed = true
			log.Error().Str("lock", name).Str("reason", h.why()).Dur("kill_after", grace).Msg("lock lost while the command ran: stopping it")
			send(syscall.SIGTERM)
			killAt = time.After(grace)
		case <-watch.C:
			if h.expires == nil || h.expires() == 0 {
				continue // leases do not expire in this mode
			}
			if now := boottime.Now(); now-lastTick > 5*watchdogInterval && !skipped {
				// This process did not run for a while (stopped, or the
				// machine suspended): the daemon's renewals wait in the
				// socket, and the deadline read is stale. Read them first,
				// by the next tick; taking it, a resumed mcnode lock
				// killed its command under a lock the daemon had renewed
				// all along (black-box round). One tick only: a process
				// starved steadily, every tick late, skipped them all, and
				// its command outlived the lease (review).
				lastTick, skipped = now, true
				continue
			}
			lastTick, skipped = boottime.Now(), false
			deadline := h.expires()
			left := deadline - boottime.Now()
			switch {
			case left <= watchdogInterval:
				if !expired {
					log.Error().Str("lock", name).Msg("the lease ran out with no renewal from the group: killing the command")
				}
				expired, lost = true, true
				send(syscall.SIGKILL)
			case left <= grace && !termed:
				termed, expired, lost = true, true, true
				log.Error().Str("lock", name).Dur("left", left).Msg("no lease renewal from the group (is the daemon stopped, or this host cut off from the group?): stopping the command before the lease runs out")
				send(syscall.SIGTERM)
			}
		case <-killAt:
			send(syscall.SIGKILL)
			killAt = nil
		case err := <-done:
			if lost {
				send(syscall.SIGKILL) // whatever the command left behind
			}
			// The command is reaped: from now on its pid, the group's
			// id, may go to another process once the group is empty.
			guard.standDown()
			if lost {
				if expired {
					return &exitError{code: exitLost, err: fmt.Errorf("lock %q: the lease ran out with no renewal while the command ran; the command was stopped", name)}
				}
				return &exitError{code: exitLost, err: fmt.Errorf("lock %q was lost while the command ran", name)}
			}
			return commandStatus(err)
		}
	}
}

// watchdogInterval is how often the lock client compares its lease
// deadline with the clock: the SIGKILL lands within this before the
// deadline. It polls rather than sleeping until the deadline, because a
// sleep does not count a suspend of the machine and the deadline does.
const watchdogInterval = 20 * time.Millisecond

// commandStatus turns the command's outcome into mcnode's exit status.
func commandStatus(err error) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return &exitError{code: 128 + int(ws.Signal())}
		}
		return &exitError{code: ee.ExitCode()}
	}
	return &exitError{code: 1, err: err}
}
