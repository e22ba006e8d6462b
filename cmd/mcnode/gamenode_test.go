package main

import (
	"testing"

	"github.com/mcnode/mcnode"
)

// countingLocker reports fixed traffic counters, and no status once it has
// stopped, as a node declared failed does.
type countingLocker struct {
	mcnode.Locker // the rest is not called
	st            mcnode.Status
	stopped       bool
}

func (c *countingLocker) Status() (mcnode.Status, error) {
	if c.stopped {
		return mcnode.Status{}, mcnode.ErrClosed
	}
	return c.st, nil
}

// A restarted player's traffic figures carry on from its earlier nodes'
// rather than start again at zero (the game publishes them).
func TestRestartedNodeKeepsCounting(t *testing.T) {
	first := &countingLocker{st: mcnode.Status{Sent: 10, Core: 6, Updates: 3, Received: 40, Dropped: 1}}
	r := &restartingNode{cur: first, swapped: make(chan struct{})}
	if st, err := r.Status(); err != nil || st.Sent != 10 || st.Received != 40 {
		t.Fatalf("first node: %+v, %v", st, err)
	}
	first.stopped = true // declared failed: its status is gone
	second := &countingLocker{st: mcnode.Status{Sent: 2, Core: 1, Updates: 1, Received: 5, Dropped: 0}}
	if !r.use(second) {
		t.Fatal("use refused a node before any Close")
	}
	st, err := r.Status()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := trafficOf(st), (traffic{12, 7, 4, 45, 1}); got != want {
		t.Fatalf("after a restart: counters %+v, want %+v (the first node's added)", got, want)
	}
	second.st.Sent = 5 // the same node counts on: read anew, not added twice
	if st, _ := r.Status(); st.Sent != 15 {
		t.Fatalf("Sent %d after the second node sent 3 more, want 15", st.Sent)
	}
}
