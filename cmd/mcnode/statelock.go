package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

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
// A state directory where the lock cannot be taken at all (a file system
// without flock) is logged and used unlocked, as before the lock existed.
func claimState(base string, log zerolog.Logger) (release func(), err error) {
	path := base + ".lock"
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		log.Warn().Err(err).Msg("cannot open the state directory's lock file: nothing keeps a second daemon of this group from sharing the state directory")
		return func() {}, nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &exitError{code: 1, err: fmt.Errorf("another daemon of this group (%s) keeps its state in %s: two daemons sharing a state directory would remove each other's membership record; give each its own --state-dir", holder, path)}
		}
		log.Warn().Err(err).Str("file", path).Msg("cannot lock the state directory's lock file: nothing keeps a second daemon of this group from sharing the state directory")
		return func() {}, nil
	}
	// Whose lock it is, for the message the next one gets; the lock, not
	// this content, is what counts.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}

// readHolder is who holds the lock file f, as the holder wrote it there.
func readHolder(f *os.File) string {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return "process unknown"
	}
	return "process " + strconv.Itoa(pid)
}
