package group_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
)

// manualClock is a clock the test moves by hand; its ticker delivers only
// the ticks the test sends, as a stalled or paused process would see.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
	ch  chan time.Time
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Unix(1_700_000_000, 0), ch: make(chan time.Time)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) NewTicker(time.Duration) group.Ticker { return c }
func (c *manualClock) C() <-chan time.Time                  { return c.ch }
func (c *manualClock) Stop()                                {}

// advance moves the clock by d and delivers one tick.
func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	c.ch <- now
}

// run advances the clock one tick at a time until stop is closed.
func (c *manualClock) run(tick time.Duration, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
			c.advance(tick)
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// A process that stalls while holding a lock (a long GC pause, SIGSTOP, a
// suspended VM) sees a single tick when it resumes, however long it was
// gone. Its lease is measured on the monotonic clock, so it finds the lease
// expired at once and gives the lock up, rather than believing only one
// tick passed.
func TestStalledNodeFindsItsLeaseExpired(t *testing.T) {
	net := memnet.New(11)
	clocks := []*manualClock{newManualClock(), newManualClock()}
	stops := []chan struct{}{make(chan struct{}), make(chan struct{})}
	var gs []*group.Group
	for i, c := range clocks {
		go c.run(10*time.Millisecond, stops[i])
		cfg := memConfig(net)
		cfg.Clock = c
		g, err := group.Join(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		gs = append(gs, g)
	}
	l := holdOffServer(t, gs[1], "r")
	close(stops[1])                     // the holder stalls ...
	clocks[1].advance(10 * time.Second) // ... for ten seconds, and gets one tick
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("after a 10 s stall the holder still believes it holds the lock")
	}
	close(stops[0])
}
