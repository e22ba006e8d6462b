package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// claimState makes this process the only daemon that keeps the group's state
// files beside base (the timestamp file's path without its suffix): it holds
// an exclusive flock on base+".lock" until release is called or the process
// ends (the kernel drops the lock then, so a killed daemon leaves none
// behind). Two daemons of one group sharing a state directory (with their
// own --socket) would each remove the membership record the other keeps on
// leaving, so that the other, killed later, could found a second group when
// it starts again; and their timestamps and fencing tokens would overwrite
// each other's. The second one is refused, naming the first's process.
//
// A daemon stopped just before may still be leaving its group, holding the
// lock, for up to leaveTimeout: the claim waits that long (and a little
// more) before it refuses. A state directory where the lock cannot be
// taken at all (a file system without flock) is logged and used unlocked,
// as before the lock existed.
func claimState(base string, log zerolog.Logger) (release func(), err error) {
	path := base + ".lock"
	// Never through a symbolic link: the file's content is rewritten, and
	// a link planted in a state directory others can write could point at
	// any file the daemon may write.
	// Nor blocking on a FIFO planted there (O_NONBLOCK; the file must
	// then prove regular).
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if errors.Is(err, os.ErrPermission) {
		// Root's file (an earlier `sudo mcnode run`): flock needs no write.
		f, err = os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, &exitError{code: 1, err: fmt.Errorf("the state directory's lock file %s is a symbolic link: remove it (mcnode makes its own)", path)}
	}
	if err != nil {
		log.Warn().Err(err).Msg("cannot open the state directory's lock file: nothing keeps a second daemon of this group from sharing the state directory")
		return func() {}, nil
	}
	// A file another user made could be held by that user to keep the
	// daemon from starting, or name a holder of its choosing.
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG || (st.Uid != uint32(os.Geteuid()) && st.Uid != 0) {
		f.Close()
		return nil, &exitError{code: 1, err: fmt.Errorf("the state directory's lock file %s is not a regular file of this user's or root's: remove it (mcnode makes its own), and keep the state directory to yourself", path)}
	}
	deadline := time.Now().Add(claimWait)
	waited := false
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			break
		}
		if !waited {
			waited = true
			log.Info().Str("file", path).Str("holder", readHolder(f)).Msg("another daemon of this group holds the state directory; waiting in case it is leaving")
		}
		time.Sleep(claimPoll)
	}
	if err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &exitError{code: 1, err: fmt.Errorf("another daemon of this group (%s) keeps its state in the directory of %s: stop it first; a second member on this host needs its own --state-dir and --socket", holder, path)}
		}
		log.Warn().Err(err).Str("file", path).Msg("cannot lock the state directory's lock file: nothing keeps a second daemon of this group from sharing the state directory")
		return func() {}, nil
	}
	writeHolder(f)
	return func() { f.Close() }, nil
}

// How long claimState waits for a daemon that may be leaving, and how often
// it tries meanwhile.
var (
	claimWait = leaveTimeout + time.Second
	claimPoll = 100 * time.Millisecond
)

// writeHolder writes who holds the lock into f, for the message the next
// claimant gets; the lock, not this content, is what counts. Only into a
// regular file of this user's with no other name: a hard link planted in a
// directory others can write must not let the daemon overwrite the file it
// names.
func writeHolder(f *os.File) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Nlink != 1 || st.Uid != uint32(os.Geteuid()) {
		return
	}
	host, _ := os.Hostname()
	if f.Truncate(0) == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+" "+host+"\n"), 0)
	}
}

// readHolder is who holds the lock file f, as the holder wrote it there.
func readHolder(f *os.File) string {
	b := make([]byte, 300)
	n, _ := f.ReadAt(b, 0)
	fields := strings.Fields(string(b[:n]))
	if len(fields) == 0 {
		return "process unknown"
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil || pid <= 0 {
		return "process unknown"
	}
	s := "process " + strconv.Itoa(pid)
	if len(fields) > 1 {
		s += " on " + shown(fields[1])
	}
	return s
}
