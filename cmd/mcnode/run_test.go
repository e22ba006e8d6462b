package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
)

// A start that gave up because the daemon was told to stop is no failure;
// one that failed for a reason of its own is one, even if a signal came at
// the same time (it used to exit 0 then).
func TestStoppedBeforeJoining(t *testing.T) {
	live := context.Background()
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	gaveUp := fmt.Errorf("group: joining %q: %w", "g", context.Canceled)
	failed := errors.New("--listen 127.0.0.1:7000: address already in use")
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want error
	}{
		{"gave up on the stop", stopped, gaveUp, nil},
		{"gave up on the stop, as the start functions say it", stopped, &exitError{code: 1, err: gaveUp}, nil},
		{"failed as the stop came", stopped, failed, failed},
		{"failed, no stop", live, failed, failed},
		{"cancelled from elsewhere, no stop", live, gaveUp, gaveUp},
	} {
		if got := stoppedBeforeJoining(c.ctx, c.err, zerolog.Nop()); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// sigIgnMask reads the kernel's disposition, which signal.Ignored does not
// know for an ignore inherited across exec.
func TestSigIgnMask(t *testing.T) {
	bit := uint64(1) << (syscall.SIGUSR2 - 1)
	if sigIgnMask()&bit != 0 {
		t.Fatal("SIGUSR2 ignored before anything ignored it")
	}
	signal.Ignore(syscall.SIGUSR2)
	defer signal.Reset(syscall.SIGUSR2)
	if sigIgnMask()&bit == 0 {
		t.Fatal("SIGUSR2 not seen ignored after signal.Ignore")
	}
}

// The game plays in a group of its own: MCNODE_GROUP, exported for the
// user's locks, must not take it into theirs; the other commands read it.
func TestGameIgnoresMCNODEGROUP(t *testing.T) {
	type flag interface {
		Names() []string
		GetValue() string
		GetEnvVars() []string
	}
	groupFlag := func(name string) flag {
		for _, cmd := range newApp().Commands {
			if cmd.Name != name {
				continue
			}
			for _, f := range cmd.Flags {
				if gf, ok := f.(flag); ok && slices.Contains(gf.Names(), "group") {
					return gf
				}
			}
		}
		t.Fatalf("mcnode %s has no --group", name)
		return nil
	}
	if g := groupFlag("game"); g.GetValue() != "mcnode-game" || len(g.GetEnvVars()) != 0 {
		t.Errorf("game --group: default %q, environment %v; want mcnode-game and none", g.GetValue(), g.GetEnvVars())
	}
	for _, name := range []string{"run", "lock", "status"} {
		if g := groupFlag(name); !slices.Contains(g.GetEnvVars(), "MCNODE_GROUP") {
			t.Errorf("%s --group does not read MCNODE_GROUP: %v", name, g.GetEnvVars())
		}
	}
}

// catchable never drops SIGTERM, so that a list given with it is never
// empty (to signal.Notify, no signal means every signal), and drops the
// others only if this process started with them ignored.
func TestCatchable(t *testing.T) {
	defer func(m uint64) { ignoredAtStart = m }(ignoredAtStart)
	ignoredAtStart = ^uint64(0) // as if started with every signal ignored
	if got := catchable(os.Interrupt, syscall.SIGTERM, syscall.SIGHUP); !slices.Equal(got, []os.Signal{syscall.SIGTERM}) {
		t.Errorf("with every signal ignored at start: %v, want SIGTERM alone", got)
	}
	ignoredAtStart = 0
	if got := catchable(os.Interrupt, syscall.SIGTERM, syscall.SIGHUP); len(got) != 3 {
		t.Errorf("with none ignored at start: %v, want all three", got)
	}
}
