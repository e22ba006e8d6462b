package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// One daemon at a time keeps a group's state files: a second claim is
// refused with the first's process named, until the first gives them up.
func TestClaimStateOneDaemonAtATime(t *testing.T) {
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
	for _, want := range []string{"another daemon of this group", "process " + strconv.Itoa(os.Getpid()), base + ".lock", "--state-dir"} {
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
