package arbiter_test

import (
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

// holderAndWaiter returns two members that are not the server now.
func holderAndWaiter(t *testing.T, seed int64) (s *simtest.Sim, holder, waiter *simtest.Host) {
	t.Helper()
	s = newGroup(t, 3, seed, nil)
	_, backup, others := roles(t, s)
	if len(others) < 1 {
		t.Fatal("no member besides the server and its backup")
	}
	return s, others[0], backup
}

// A release that hands the resource to a waiter goes out, and is decided, at
// once; if it is lost, the releaser sends it again after RetryTicks, not a
// heartbeat later: only a release with nobody queued may wait for the
// server's next ping.
func TestLostReleaseWithAWaiterIsRetriedAtOnce(t *testing.T) {
	exercised := 0
	for seed := int64(1); seed <= 5; seed++ {
		s, holder, waiter := holderAndWaiter(t, seed)
		acquire(t, s, holder, "r")
		waitUntil(t, s, 50, "the holder has r", func() bool { return granted(holder, "r") })
		acquire(t, s, waiter, "r")
		waitUntil(t, s, 50, "the waiter queued", func() bool {
			return waiter.Node.Resources()[0].Holder == holder.Node.ID() && len(waiter.Node.Resources()[0].Queue) == 1
		})
		if holder.Node.IsServer() {
			t.Logf("seed %d: the holder became the server: its release needs no datagram", seed)
			continue
		}
		exercised++
		dropped := false
		s.Opt.Drop = func(d *simtest.Datagram) bool {
			if !dropped && d.From == holder.Index && d.Has(wire.KindRelease) {
				dropped = true
				return true // every copy of the first send
			}
			return false
		}
		if err := holder.Node.Release("r"); err != nil {
			t.Fatal(err)
		}
		s.Check.Released(holder, "r")
		s.Flush(holder)
		from := s.Tick()
		retry := arbiter.DefaultConfig().RetryTicks
		waitUntil(t, s, retry+5, "the waiter got r after one retry of the lost release", func() bool { return granted(waiter, "r") })
		t.Logf("seed %d: the waiter got r %d ticks after the lost release (RetryTicks %d)", seed, s.Tick()-from, retry)
		if !dropped {
			t.Fatal("no release was sent")
		}
		checkClean(t, s)
	}
	if exercised < 3 {
		t.Fatalf("only %d of 5 seeds had a member release", exercised)
	}
}

// A release with nobody queued waits for the server's next ping and rides
// in its datagram: no datagram of its own, and the releaser does not send
// it again meanwhile.
func TestReleaseWithNobodyQueuedRidesOnThePing(t *testing.T) {
	s, holder, _ := holderAndWaiter(t, 3)
	acquire(t, s, holder, "r")
	waitUntil(t, s, 50, "the holder has r", func() bool { return granted(holder, "r") })
	if holder.Node.IsServer() {
		t.Fatal("the holder became the server: pick another seed")
	}
	var alone, retried, riding int
	s.Opt.Drop = func(d *simtest.Datagram) bool {
		switch {
		case d.Has(wire.KindRelease) && d.From == holder.Index:
			for _, m := range d.Packet.Messages {
				if r, ok := m.(*wire.Release); ok && r.Retry {
					retried++
				}
			}
		case d.Has(wire.KindReleased) && d.Has(wire.KindPing):
			riding++
		case d.Has(wire.KindReleased) && d.Multicast:
			alone++
		}
		return false
	}
	if err := holder.Node.Release("r"); err != nil {
		t.Fatal(err)
	}
	s.Check.Released(holder, "r")
	s.Flush(holder)
	cfg := arbiter.DefaultConfig()
	waitUntil(t, s, cfg.HeartbeatTicks+5, "the release decided", func() bool {
		rs := holder.Node.Resources()
		return len(rs) == 0 || rs[0].Holder == 0
	})
	s.RunTicks(cfg.RetryTicks + cfg.HeartbeatTicks)
	if alone > 0 || retried > 0 || riding == 0 {
		t.Errorf("the release decision went out alone %d times and in a ping's datagram %d times; the release was retried %d times", alone, riding, retried)
	}
	checkClean(t, s)
}
