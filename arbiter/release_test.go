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

// queueBehind has holder take "r" and waiter queue behind it.
func queueBehind(t *testing.T, s *simtest.Sim, holder, waiter *simtest.Host) {
	t.Helper()
	acquire(t, s, holder, "r")
	waitUntil(t, s, 50, "the holder has r", func() bool { return granted(holder, "r") })
	acquire(t, s, waiter, "r")
	waitUntil(t, s, 50, "the waiter queued", func() bool {
		rs := waiter.Node.Resources()
		return len(rs) == 1 && rs[0].Holder == holder.Node.ID() && len(rs[0].Queue) == 1
	})
}

// A release that hands the resource to a waiter goes out, and is decided, at
// once; if it is lost (every copy: the waiter would take the resource on
// hearing it), the releaser sends it again after RetryTicks, not a
// heartbeat later: only a release with nobody queued may wait for the
// server's next ping.
func TestLostReleaseWithAWaiterIsRetriedAtOnce(t *testing.T) {
	exercised := 0
	for seed := int64(1); seed <= 5; seed++ {
		s, holder, waiter := holderAndWaiter(t, seed)
		queueBehind(t, s, holder, waiter)
		if holder.Node.IsServer() {
			t.Logf("seed %d: the holder became the server: its release needs no datagram", seed)
			continue
		}
		exercised++
		dropped := false
		s.Opt.Drop = func(d *simtest.Datagram) bool {
			for _, m := range d.Packet.Messages {
				if r, ok := m.(*wire.Release); ok && d.From == holder.Index && !r.Retry {
					dropped = true
					return true // every copy of the first send
				}
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
		if s.Tick()-from < int64(retry) {
			t.Fatalf("seed %d: the waiter got r %d ticks after a release that was lost, before its retry", seed, s.Tick()-from)
		}
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

// The next holder takes the resource when it hears the holder's release, one
// one-way delay before the server's decision could hand it over (the
// synchronization delay is then T): here the server's decision is lost on
// its first send, and the waiter enters all the same, with a token above
// the holder's and at most the decision's. When the decision comes, it
// changes nothing at the waiter (no second grant, no release); the waiter's
// release, by request, is then decided as any other.
func TestNextHolderEntersOnTheRelease(t *testing.T) {
	exercised := 0
	for seed := int64(1); seed <= 5; seed++ {
		s, holder, waiter := holderAndWaiter(t, seed)
		queueBehind(t, s, holder, waiter)
		s.RunTicks(2) // the backup's ack of the waiter's place
		if holder.Node.IsServer() || waiter.Node.IsServer() {
			t.Logf("seed %d: the holder or the waiter became the server", seed)
			continue
		}
		exercised++
		holderToken := waiter.Node.Resources()[0].Token
		lostDecisions := 0
		s.Opt.Drop = func(d *simtest.Datagram) bool {
			if lostDecisions < 100 && d.Has(wire.KindReleased) {
				lostDecisions++
				return true // the server's decision, every copy, and its retransmissions for a while
			}
			return false
		}
		before := len(waiter.Events)
		if err := holder.Node.Release("r"); err != nil {
			t.Fatal(err)
		}
		s.Check.Released(holder, "r")
		s.Flush(holder)
		waitUntil(t, s, 3, "the waiter took r on the holder's release", func() bool { return granted(waiter, "r") })
		var g arbiter.Event
		for _, e := range waiter.Events[before:] {
			if e.Kind == arbiter.EventGranted {
				g = e
			}
		}
		if g.After != holderToken || g.Token <= holderToken {
			t.Fatalf("seed %d: the waiter's grant: token %d after %d; want after the holder's token %d, and above it", seed, g.Token, g.After, holderToken)
		}
		if n := waiter.Node.Stats().EnteredOnRelease; n != 1 {
			t.Fatalf("seed %d: %d entries on a release counted, want 1", seed, n)
		}
		s.Opt.Drop = nil
		waitUntil(t, s, 100, "the decision reached the waiter", func() bool {
			rs := waiter.Node.Resources()
			return len(rs) == 1 && rs[0].Holder == waiter.Node.ID()
		})
		if rs := waiter.Node.Resources(); rs[0].Token < g.Token {
			t.Fatalf("seed %d: the decision's token %d is below the token the waiter took, %d", seed, rs[0].Token, g.Token)
		}
		s.RunTicks(5)
		grants := 0
		for _, e := range waiter.Events[before:] {
			switch e.Kind {
			case arbiter.EventGranted:
				grants++
			case arbiter.EventReleased, arbiter.EventLost:
				t.Fatalf("seed %d: the waiter's event %v after the decision", seed, e)
			}
		}
		if grants != 1 || !holds(waiter, "r") {
			t.Fatalf("seed %d: %d grants at the waiter, holds r: %v", seed, grants, holds(waiter, "r"))
		}
		if err := waiter.Node.Release("r"); err != nil {
			t.Fatal(err)
		}
		s.Check.Released(waiter, "r")
		s.Flush(waiter)
		waitUntil(t, s, 50, "the waiter's release decided", func() bool {
			rs := holder.Node.Resources()
			return len(rs) == 0 || rs[0].Holder == 0
		})
		checkClean(t, s)
	}
	if exercised < 3 {
		t.Fatalf("only %d of 5 seeds had neither the holder nor the waiter serve", exercised)
	}
}

// The next holder took the resource on the holder's release and let it go at
// once, and its release reached the server before the holder's (lost on
// the way to the server alone, here). The server keeps it, and decides it
// right after the hand-over, when the holder's release comes again: the
// next holder's retries are not needed (they are lost, here).
func TestEarlyReleaseDecidedWithTheHandOver(t *testing.T) {
	exercised := 0
	for seed := int64(1); seed <= 5; seed++ {
		s, holder, waiter := holderAndWaiter(t, seed)
		queueBehind(t, s, holder, waiter)
		s.RunTicks(2) // the backup's ack of the waiter's place
		srv := server(s)
		if srv == nil || srv == holder || srv == waiter {
			t.Logf("seed %d: the holder or the waiter became the server", seed)
			continue
		}
		exercised++
		s.Opt.Drop = func(d *simtest.Datagram) bool {
			for _, m := range d.Packet.Messages {
				r, ok := m.(*wire.Release)
				switch {
				case !ok:
				case d.From == holder.Index && d.To == srv.Index && !r.Retry:
					return true // the holder's release, lost to the server alone
				case d.From == waiter.Index && r.Retry:
					return true
				}
			}
			return false
		}
		if err := holder.Node.Release("r"); err != nil {
			t.Fatal(err)
		}
		s.Check.Released(holder, "r")
		s.Flush(holder)
		waitUntil(t, s, 3, "the waiter took r on the holder's release", func() bool { return granted(waiter, "r") })
		if err := waiter.Node.Release("r"); err != nil {
			t.Fatal(err)
		}
		s.Check.Released(waiter, "r")
		s.Flush(waiter)
		retry := arbiter.DefaultConfig().RetryTicks
		waitUntil(t, s, retry+10, "both releases decided", func() bool {
			rs := srv.Node.Resources()
			return len(rs) == 0 || rs[0].Holder == 0
		})
		checkClean(t, s)
	}
	if exercised < 3 {
		t.Fatalf("only %d of 5 seeds had neither the holder nor the waiter serve", exercised)
	}
}
