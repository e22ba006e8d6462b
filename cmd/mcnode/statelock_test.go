package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// shortClaimWait makes claimState give up on a held lock at once.
func shortClaimWait(t *testing.T, wait time.Duration) {
	old := claimWait
	claimWait = wait
	t.Cleanup(func() { claimWait = old })
}

// One daemon at a time keeps a group's state files: a second claim is
// refused with the first's process and host named, until the first gives
// them up.
func TestClaimStateOneDaemonAtATime(t *testing.T) {
	shortClaimWait(t, 0)
	base := filepath.Join(t.TempDir(), "g")
	release, err := claimState(base, zerolog.Nop())
	if err != nil {
		t.Fatalf("first claim: %v", err)
	}
	_, err = claimState(base, zerolog.Nop())
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("second claim while the first holds: %v, want exit status 1", err)
	}
	host, _ := os.Hostname()
	for _, want := range []string{"another daemon of this group", "process " + strconv.Itoa(os.Getpid()) + " on " + host, base + ".lock", "stop it first", "--state-dir and --socket"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	release()
	release2, err := claimState(base, zerolog.Nop())
	if err != nil {
		t.Fatalf("claim after the first released: %v", err)
	}
	release2()
}

// A daemon that is still leaving its group holds the lock for a while: the
// next one, started meanwhile, waits for it rather than refuse.
func TestClaimStateWaitsForALeavingDaemon(t *testing.T) {
	shortClaimWait(t, 5*time.Second)
	base := filepath.Join(t.TempDir(), "g")
	release, err := claimState(base, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, release)
	release2, err := claimState(base, zerolog.Nop())
	if err != nil {
		t.Fatalf("claim while the holder lets go within the wait: %v", err)
	}
	release2()
}

// The lock file is never opened through a symbolic link, nor is a file
// with another name (a hard link) written: either, planted in a state
// directory others can write, would make the daemon overwrite the file it
// names.
func TestClaimStateLinks(t *testing.T) {
	shortClaimWait(t, 0)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "sym.lock")); err != nil {
		t.Fatal(err)
	}
	if _, err := claimState(filepath.Join(dir, "sym"), zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a lock file that is a symbolic link: %v, want it refused", err)
	}
	if err := os.Link(victim, filepath.Join(dir, "hard.lock")); err != nil {
		t.Fatal(err)
	}
	release, err := claimState(filepath.Join(dir, "hard"), zerolog.Nop())
	if err != nil {
		t.Fatalf("a lock file with a second name: %v", err)
	}
	release()
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("the linked file now holds %q", b)
	}
}

// A state directory where no lock file can be made is used unlocked, as
// before the lock existed (its state files will warn for themselves).
func TestClaimStateWithoutALockFile(t *testing.T) {
	base := filepath.Join(t.TempDir(), "gone", "g") // no such directory
	release, err := claimState(base, zerolog.Nop())
	if err != nil {
		t.Fatalf("claim where no lock file can be made: %v, want a warning only", err)
	}
	release()
}

// A FIFO planted as the lock file neither blocks the daemon nor is taken
// for a lock: it is refused.
func TestClaimStateFIFO(t *testing.T) {
	shortClaimWait(t, 0)
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "g.lock"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := claimState(filepath.Join(dir, "g"), zerolog.Nop())
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("a FIFO as the lock file: %v, want it refused", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("claimState blocked on a FIFO")
	}
}
