package main

// The lock guard: without a daemon the lock lives in the mcnode lock
// process, and dies with it. mcnode lock runs its command with Pdeathsig,
// so the command dies too, however mcnode lock dies; but what the command
// started does not (`sh -c 'long-job; other'` leaves long-job running). Once
// the lease runs out the group hands the lock on, and the next holder's work
// would overlap with what is left of this one's. The guard is a helper that
// outlives a killed mcnode lock just long enough to SIGKILL the command's
// whole process group.
//
// mcnode lock starts the guard, re-executing its own binary, just before the
// command (only when the command gets a process group of its own: not with
// --foreground, whose group is the terminal's job, mcnode lock included).
// The guard holds the read end of a pipe whose write end only mcnode lock
// holds (close-on-exec: neither the guard nor the command inherits a copy).
// On it, mcnode lock writes:
//
//	PGID "\n"   once the command runs, its process group (its pid)
//	"."         once the command has ended and been dealt with: stand down
//
// The guard exits at the stand-down without killing anything. Should the
// pipe close without it, mcnode lock has died (SIGKILL, a crash, the OOM
// killer: the kernel closes its descriptors however it ends), and the guard
// sends SIGKILL to the process group, says so on stderr and exits. A pipe
// that closes before a process group was written means the command never
// ran, and there is nothing to kill; or that mcnode lock died in the
// microseconds between the command's exec (the group exists once Start
// returns) and the write: the command then dies of Pdeathsig, and what it
// could have started meanwhile is not reached. The guard runs before the
// command starts, so there is no such window on its side.
//
// The guard runs in a process group of its own, neither the command's (the
// lost-lease SIGTERM and SIGKILL of the command's group must not reach it)
// nor mcnode lock's: a shell's `kill -9 %1` reaches every process of mcnode
// lock's job at once, and would kill the guard with mcnode lock, which is
// just when it is needed; so does the terminal's Ctrl-C, which is mcnode
// lock's to handle (it passes it on to the command).

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

const (
	// guardEnv, in the environment, makes mcnode the guard of the mcnode
	// lock that started it (main checks it before anything else). It is
	// an environment variable rather than a subcommand so that it appears
	// in no help and no completion, and no flag or config file is read.
	// Its value is the protocol above, should it ever change: a guard
	// that does not know it refuses rather than misread the pipe.
	guardEnv      = "MCNODE_LOCK_GUARD"
	guardProtocol = "1"
	// guardArgv0 is the guard's argv[0], so that ps names it.
	guardArgv0 = "mcnode-lock-guard"
	// guardStandDown tells the guard that mcnode lock is done with the
	// command: exit, and kill nothing.
	guardStandDown = '.'
	// guardExitWait bounds how long mcnode lock waits for a guard told to
	// stand down to exit: at once, unless it was stopped (SIGSTOP), which
	// must not hold up the release of the lock.
	guardExitWait = time.Second
)

// lockGuard is mcnode lock's side of its guard. A nil *lockGuard (none
// could be started) does nothing.
type lockGuard struct {
	log    zerolog.Logger
	w      *os.File      // the pipe's write end; only this process holds it
	exited chan struct{} // closed once the guard has exited and been reaped
	// standingDown is set once the guard is told to stand down: its exit
	// is then expected.
	standingDown atomic.Bool
}

// startGuard starts the guard of lock name's command. It runs the very
// binary this process runs (/proc/self/exe), not the one at its path: an
// upgrade may have replaced or removed that since mcnode lock started, and
// a guard from another version might speak another protocol.
func startGuard(name, logFormat string, log zerolog.Logger) (*lockGuard, error) {
	r, w, err := os.Pipe() // both ends close-on-exec
	if err != nil {
		return nil, fmt.Errorf("guard pipe: %w", err)
	}
	defer r.Close() // the guard has its own copy, as descriptor 3
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{guardArgv0, name, logFormat, strconv.Itoa(os.Getpid())}
	cmd.Env = append(os.Environ(), guardEnv+"="+guardProtocol)
	cmd.Stderr = os.Stderr // where it says it killed the command's group
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("starting the guard: %w", err)
	}
	g := &lockGuard{log: log, w: w, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		if !g.standingDown.Load() {
			log.Warn().Err(err).Str("lock", name).Msg("the guard exited before the command: if mcnode lock is killed now, what the command started outlives the lock")
		}
		close(g.exited)
	}()
	return g, nil
}

// arm tells the guard the command's process group, once the command runs.
func (g *lockGuard) arm(pgid int) {
	if g == nil {
		return
	}
	if _, err := fmt.Fprintf(g.w, "%d\n", pgid); err != nil {
		g.log.Warn().Err(err).Msg("cannot tell the guard the command's process group: if mcnode lock is killed, what the command started outlives the lock")
	}
}

// standDown tells the guard to exit without killing, and waits for it to
// (within guardExitWait). Call it once the command has ended and what is
// left of its process group has been dealt with.
func (g *lockGuard) standDown() {
	if g == nil {
		return
	}
	g.standingDown.Store(true)
	_, _ = g.w.Write([]byte{guardStandDown}) // a guard gone already does not need it
	g.w.Close()
	select {
	case <-g.exited:
	case <-time.After(guardExitWait):
		g.log.Warn().Dur("waited", guardExitWait).Msg("the guard, told to stand down, has not exited (is it stopped?)")
	}
}

// runGuard is the guard process: args are guardArgv0, the lock's name, the
// log format and mcnode lock's pid (for what it says); descriptor 3 is the
// pipe from mcnode lock. It returns the exit status.
func runGuard(args []string) int {
	// Signals that come to the terminal's or a job's processes are mcnode
	// lock's to handle, not the guard's: it passes them on to the command,
	// waits for it and then stands the guard down. Dying of one first, the
	// guard would leave the command's children unguarded while mcnode lock
	// still holds the lock. Ignoring them cannot make it linger: it exits
	// as soon as mcnode lock's end of the pipe closes, however mcnode lock
	// ends (SIGKILL still ends the guard itself). SIGTTOU is ignored too,
	// so that a guard in the background of a terminal with tostop set
	// writes its message rather than stop for good; SIGPIPE so that a
	// closed stderr does not kill it before it is done.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	// Started as /proc/self/exe, its name would be "exe" in ps and top.
	_ = os.WriteFile("/proc/self/comm", []byte("mcnode-guard"), 0)

	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "mcnode: "+format+"\n", a...)
		return exitUsage
	}
	if v := os.Getenv(guardEnv); v != guardProtocol {
		return fail("%s=%q: this variable is for the guard process mcnode lock starts (protocol %s); unset it", guardEnv, v, guardProtocol)
	}
	var st unix.Stat_t
	if err := unix.Fstat(3, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO || len(args) != 4 {
		return fail("%s is set, but this is no guard started by mcnode lock (descriptor 3 is not its pipe): the variable is for mcnode lock's own use; unset it", guardEnv)
	}
	name, lockPid := args[1], args[3]
	log, ok := stderrLogger(args[2])
	if !ok {
		log, _ = stderrLogger("auto")
	}
	log = log.With().Str("lock", name).Str("mcnode_lock_pid", lockPid).Logger()

	r := bufio.NewReader(os.NewFile(3, "mcnode lock's guard pipe"))
	line, err := r.ReadString('\n')
	if err != nil {
		// Closed (or stood down) before the command ran: nothing to guard.
		return 0
	}
	pgid, err := strconv.Atoi(strings.TrimSuffix(line, "\n"))
	// Never kill(-1) (every process this user may signal), nor the guard's
	// own group: neither can be the command's.
	if err != nil || pgid <= 1 || pgid == unix.Getpgrp() {
		log.Error().Str("read", line).Msg("the guard read no process group it may kill from mcnode lock; it guards nothing")
		return 1
	}
	if b, err := r.ReadByte(); err == nil && b == guardStandDown {
		return 0
	}
	// mcnode lock is gone without standing the guard down: it died
	// (anything else it wrote is no stand-down either).
	//
	// The group's id is the command's pid, which the kernel does not give
	// to another process while the group has a member, and mcnode lock
	// stands the guard down before anything else once it has reaped the
	// command. So the id is another group's only if the command and
	// everything in its group ended, and the pid was handed out again, in
	// the moment between mcnode lock reaping the command and standing the
	// guard down, or between mcnode lock's death and this kill; pids are
	// handed out in turn, all of pid_max before one comes back, so that
	// takes a process-creating storm in a few microseconds. A group
	// already gone is ESRCH, and fine.
	//
	// Processes that left the group (setsid, setpgid: daemons, a job
	// control shell's jobs) are out of reach.
	switch err := unix.Kill(-pgid, unix.SIGKILL); {
	case err == nil:
		log.Error().Int("pgid", pgid).Msg("mcnode lock died holding the lock: its guard killed the command's process group, so that nothing it started outlives the lock")
	case errors.Is(err, unix.ESRCH):
		log.Warn().Int("pgid", pgid).Msg("mcnode lock died holding the lock; its command's process group had ended already")
	default:
		log.Error().Err(err).Int("pgid", pgid).Msg("mcnode lock died holding the lock, and its guard could not kill the command's process group: what it started may outlive the lock")
		return 1
	}
	return 0
}
