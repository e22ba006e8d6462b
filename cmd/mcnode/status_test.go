package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcnode/mcnode/group"
)

// `mcnode status` shows every drop by reason, and their sum.
func TestStatusShowsDropsByReason(t *testing.T) {
	st := group.Status{Group: "g", Stats: group.Stats{Received: 40,
		Drops: map[string]uint64{group.DropForged: 3, group.DropMalformed: 2, group.DropOversized: 1}}}
	v := viewStatus(st)
	if v.Dropped != 6 {
		t.Errorf("dropped %d, want 6", v.Dropped)
	}
	var out bytes.Buffer
	printStatus(&out, v)
	want := "datagrams: 40 received, 6 dropped (forged 3, malformed 2, oversized 1)"
	if !strings.Contains(out.String(), want) {
		t.Errorf("status output lacks %q:\n%s", want, out.String())
	}
}

// TestE2EStatusWatch: `mcnode status --watch --json` prints the daemon's
// status again and again, says when the daemon is gone, and stops cleanly
// on SIGINT.
func TestE2EStatusWatch(t *testing.T) {
	c := newCluster(t, 1, 1)
	c.waitMembers(0, 1)
	cmd := c.mcnode(0, "status", "--watch", "--interval", "100ms", "--json")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	c.kill(0)
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("status --watch ended with %v: %s", err, out.String())
	}
	var views, errs int
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var v struct {
			Members []memberView `json:"members"`
			Error   string       `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		switch {
		case len(v.Members) == 1 && errs == 0:
			views++
		case v.Error != "":
			errs++
		default:
			t.Errorf("line %q: neither a status (before the kill) nor an error", line)
		}
	}
	if views < 5 || errs < 2 {
		t.Errorf("%d statuses then %d errors, want several of each:\n%s", views, errs, out.String())
	}
}

// TestE2EStatusWatchStoppedDaemon: Ctrl-C ends `mcnode status --watch` at
// once even while the daemon, stopped, leaves its question unanswered.
func TestE2EStatusWatchStoppedDaemon(t *testing.T) {
	c := newCluster(t, 1, 1)
	c.waitMembers(0, 1)
	daemon := c.daemons[0].Process
	if err := daemon.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer daemon.Signal(syscall.SIGCONT)
	cmd := c.mcnode(0, "status", "--watch", "--interval", "100ms", "--json")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("status --watch ended with %v: %s", err, out.String())
		}
	case <-time.After(time.Second):
		cmd.Process.Kill()
		t.Fatalf("status --watch ignored Ctrl-C for a second while the daemon was stopped: %s", out.String())
	}
}
