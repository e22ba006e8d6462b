package arbiter_test

import (
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
)

// Hosts started together, each free to found the group if nobody answers
// (as `mcnode run` is on a first start, and the library by default), found
// one group, not one each: each would grant the same locks. All start at
// once, or one after another a fraction of the join timeout apart (a host
// that starts after another's last join request must still hear of it
// before its own wait runs out), over a network that delays and
// duplicates. It found a group per host when the join timeout and the
// retry interval were equal.
func TestNewcomersStartedTogetherFoundOneGroup(t *testing.T) {
	for _, gap := range []int64{0, 1, 7, simtest.SubTicks * 2, simtest.SubTicks * 5, simtest.SubTicks * 37} {
		for seed := int64(1); seed <= 60; seed++ {
			n := 2 + int(seed%4)
			s := simtest.New(simtest.Options{Seed: seed, Hosts: n, Dup: 0.05, Loss: 0.05,
				// Staggered, the hosts after the first start anew below;
				// what their first incarnations sent at once is lost.
				Drop: func(d *simtest.Datagram) bool { return gap > 0 && d.Sent == 0 && d.From != 0 },
				Tweak: func(c *arbiter.Config) {
					// The runtime's mapping on a LAN (group.DefaultLANConfig):
					// found after one join timeout, ten heartbeats, asked
					// three times in it.
					c.Bootstrap = false
					c.FoundAfterTicks = 10 * c.HeartbeatTicks
					c.JoinRetryTicks = c.FoundAfterTicks / 3
					c.Inc = arbiter.FounderInc(c.Inc, true)
				}})
			// New started every host at once; staggered, all but the
			// first start again, one after another, gap apart.
			for i := 1; i < n && gap > 0; i++ {
				s.Crash(i)
			}
			for i := 1; i < n && gap > 0; i++ {
				s.RunUntil(s.Now+gap, nil)
				s.Start(i, false)
			}
			ok := s.RunUntil(s.Now+2000*simtest.SubTicks, func() bool {
				for _, h := range s.Hosts {
					if !h.Node.Joined() {
						return false
					}
				}
				return true
			})
			instances := map[uint64]int{}
			for _, h := range s.Hosts {
				if h.Node.Joined() {
					instances[h.Node.Instance()]++
				}
			}
			if !ok || len(instances) != 1 {
				t.Fatalf("gap %d, seed %d, %d hosts: joined %v, groups (instance: members) %v; want one group of all",
					gap, seed, n, ok, instances)
			}
			for _, v := range s.Check.Violations {
				t.Errorf("gap %d, seed %d: %s", gap, seed, v)
			}
		}
	}
}

// A newcomer that starts after the lowest one's last join request, and
// before that one founds the group, must hear of it before its own wait
// runs out, even if the founder's first datagrams to it are lost: the
// lowest answers its request with one of its own, and the newcomer then
// waits long enough to be admitted. Without that answer it founded a
// second group here.
func TestLateNewcomerHearsOfTheFounder(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		var s *simtest.Sim
		const gap = 5 // ticks
		cut := int64(0)
		s = simtest.New(simtest.Options{Seed: seed, Hosts: 2,
			Drop: func(d *simtest.Datagram) bool {
				// Host 1's first incarnation dies unheard; the group host 0
				// founds is not heard by host 1 until after host 1's wait
				// would end without the founder's answer.
				return d.From == 1 && d.Sent == 0 || d.From == 0 && d.To == 1 && d.Packet.Header.Instance != 0 && s.Now < cut
			},
			Tweak: func(c *arbiter.Config) {
				c.Bootstrap = false
				c.FoundAfterTicks = 10 * c.HeartbeatTicks
				c.JoinRetryTicks = c.FoundAfterTicks / 3
				c.Inc = arbiter.FounderInc(c.Inc, true)
			}})
		cut = int64(gap+10*arbiter.DefaultConfig().HeartbeatTicks+5) * simtest.SubTicks
		s.Crash(1)
		s.RunUntil(gap*simtest.SubTicks, nil)
		for s.Start(1, false); s.Hosts[1].Node.Inc() < s.Hosts[0].Node.Inc(); s.Start(1, false) {
			// Host 0 must be the lower incarnation, the one that founds.
		}
		ok := s.RunUntil(s.Now+2000*simtest.SubTicks, func() bool {
			return s.Hosts[0].Node.Joined() && s.Hosts[1].Node.Joined()
		})
		if !ok || s.Hosts[0].Node.Instance() != s.Hosts[1].Node.Instance() {
			t.Fatalf("seed %d: joined %v, instances %x and %x; want one group", seed, ok, s.Hosts[0].Node.Instance(), s.Hosts[1].Node.Instance())
		}
	}
}

// A newcomer that may not found (it was a member and waits for its group,
// or only looks) never holds off one that may: the README's recovery, all
// daemons stopped, the rest waiting, one started with --found. A waiting
// newcomer of a lower incarnation kept the founder waiting for good (42 of
// 50 seeds in a review); the runtime now ranks every founder's incarnation
// below every other newcomer's (FounderInc), and a newcomer that may not
// found does not answer.
func TestWaitingNewcomersLetTheFounderFound(t *testing.T) {
	for seed := int64(1); seed <= 50; seed++ {
		s := simtest.New(simtest.Options{Seed: seed, Hosts: 4,
			Tweak: func(c *arbiter.Config) {
				c.Bootstrap = false
				c.JoinRetryTicks = 10 * c.HeartbeatTicks / 3
				if c.Addr == "h0" {
					c.FoundAfterTicks = 10 * c.HeartbeatTicks
				}
				c.Inc = arbiter.FounderInc(c.Inc, c.FoundAfterTicks > 0)
			}})
		ok := s.RunUntil(s.Now+1000*simtest.SubTicks, func() bool {
			for _, h := range s.Hosts {
				if !h.Node.Joined() {
					return false
				}
			}
			return true
		})
		if !ok {
			t.Fatalf("seed %d: the one newcomer that may found did not, or the others did not join: h0 joined %v", seed, s.Hosts[0].Node.Joined())
		}
	}
}

// A newcomer paused past its join timeout (SIGSTOP, a stall at boot) reads
// what waits in its socket before it founds: the group's admission. It
// founded a second group first, every time, in a review.
func TestPausedNewcomerDoesNotFoundBesideTheGroup(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		s := simtest.New(simtest.Options{Seed: seed, Hosts: 4,
			Tweak: func(c *arbiter.Config) {
				if c.Addr == "h3" {
					c.FoundAfterTicks = 10 * c.HeartbeatTicks
					c.JoinRetryTicks = c.FoundAfterTicks / 3
				}
			}})
		s.Pause(3, false) // its first join request is out; the answer waits
		// Past its found timeout (100 ticks), short of a lease and its
		// margin (180), after which the group removes it for its silence.
		s.RunTicks(150)
		s.Resume(3)
		ok := s.RunUntil(s.Now+500*simtest.SubTicks, func() bool { return s.Hosts[3].Node.Joined() })
		if !ok || s.Hosts[3].Node.Instance() != s.Hosts[0].Node.Instance() {
			t.Fatalf("seed %d: the resumed newcomer joined %v, in instance %x; the group's is %x", seed, ok, s.Hosts[3].Node.Instance(), s.Hosts[0].Node.Instance())
		}
	}
}

// A newcomer paused one tick short of founding, resumed after another has
// founded, reads that group's datagrams before it founds: it joins. The
// catch-up step ran its wait out and founded a second group at once, every
// seed, in a review.
func TestNewcomerPausedJustBeforeFoundingJoins(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		const found, retry = 100, 33
		s := simtest.New(simtest.Options{Seed: seed, Hosts: 2,
			Tweak: func(c *arbiter.Config) {
				c.Bootstrap, c.FoundAfterTicks, c.JoinRetryTicks = false, found, retry
				c.Inc = arbiter.FounderInc(c.Inc, true)
			}})
		low := 0
		if s.Hosts[1].Node.Inc() < s.Hosts[0].Node.Inc() {
			low = 1
		}
		s.RunTicks(found - 1)
		s.Pause(low, false)
		s.RunTicks(4 * found)
		if !s.Hosts[1-low].Node.Joined() {
			t.Fatalf("seed %d: the other newcomer did not found while the lower one was paused", seed)
		}
		s.Resume(low)
		ok := s.RunUntil(s.Now+1000*simtest.SubTicks, func() bool { return s.Hosts[low].Node.Joined() })
		if !ok || s.Hosts[low].Node.Instance() != s.Hosts[1-low].Node.Instance() {
			t.Fatalf("seed %d: the resumed newcomer joined %v, instance %x beside %x", seed, ok, s.Hosts[low].Node.Instance(), s.Hosts[1-low].Node.Instance())
		}
	}
}

// A lower newcomer that will never found (it heard a group, which then
// died, and was never admitted) holds a newcomer that may found off only
// for a while: one that asks longer than founding could take counts no
// more. It held it off for good in a review.
func TestStuckLowerNewcomerHoldsNoFounderOff(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		const found, retry = 100, 33
		restartAt := int64(60 * simtest.SubTicks)
		var s *simtest.Sim
		s = simtest.New(simtest.Options{Seed: seed, Hosts: 3,
			Drop: func(d *simtest.Datagram) bool {
				return d.From == 1 && d.To == 0 || (d.From == 2 || d.To == 2) && d.Sent < restartAt
			},
			Tweak: func(c *arbiter.Config) {
				switch c.Addr {
				case "h1":
					c.Bootstrap, c.FoundAfterTicks, c.JoinRetryTicks, c.Inc = false, found, retry, arbiter.FounderInc(1001, true)
				case "h2":
					c.Bootstrap, c.FoundAfterTicks, c.JoinRetryTicks, c.Inc = false, found, retry, arbiter.FounderInc(2001, true)
				}
			}})
		s.RunTicks(50) // h1 hears h0's group, and is never admitted
		s.Crash(0)
		s.Crash(2)
		s.RunUntil(restartAt, nil)
		s.Start(2, false)
		if !s.RunUntil(s.Now+2000*simtest.SubTicks, func() bool { return s.Hosts[2].Node.Joined() }) {
			t.Fatalf("seed %d: the newcomer that may found never did, held off by one that never will", seed)
		}
	}
}
