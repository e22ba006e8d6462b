package arbiter_test

import (
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
)

// unheardOf returns what h's view says of member id: the SYNC's silence and
// the server's own count.
func unheardOf(h *simtest.Host, id uint64) (silence, unheard uint64) {
	for _, m := range h.Node.Members() {
		if uint64(m.ID) == id {
			return m.Silence, m.Unheard
		}
	}
	return 0, 0
}

// A dead member shows as unheard at the server a few heartbeats after its
// death, before the SYNC that lists it (which other members then show),
// and live members never do (mcnode status marks them by it). The dead
// member is the server itself in odd seeds: the new server shows it a few
// heartbeats after the takeover.
func TestServerShowsADeadMemberUnheard(t *testing.T) {
	cfg := arbiter.DefaultConfig()
	for seed := int64(1); seed <= 20; seed++ {
		s := newGroup(t, 5, seed*3+2, nil)
		// Live members never show, at a turn's start (nobody heard yet in
		// it) no more than later.
		s.RunUntil(s.Now+int64(150+seed%40)*simtest.SubTicks, func() bool {
			for _, h := range s.Hosts {
				if h.Node.IsServer() {
					for _, m := range h.Node.Members() {
						if m.Unheard > 0 {
							t.Fatalf("seed %d, tick %d: the server counts live node %d unheard for %d ticks", seed, s.Tick(), m.ID, m.Unheard)
						}
					}
				}
			}
			return false
		})
		srv, _, others := roles(t, s)
		dead, other := others[0], others[1]
		bound := 6 * cfg.HeartbeatTicks
		if seed%2 == 1 {
			dead = srv
			bound += int(cfg.Params.TakeoverTicks) + cfg.StaggerTicks + cfg.ClaimTicks
		}
		s.Crash(dead.Index)
		id := uint64(dead.Node.ID())
		waitUntil(t, s, bound, "the server counts the dead member unheard", func() bool {
			if srv := server(s); srv != nil {
				_, u := unheardOf(srv, id)
				return u > 0
			}
			return false
		})
		srv = server(s)
		for _, h := range s.Hosts {
			if h == dead {
				continue
			}
			if _, u := unheardOf(srv, uint64(h.Node.ID())); u > 0 {
				t.Fatalf("seed %d: the server counts live node %d unheard for %d ticks", seed, h.Node.ID(), u)
			}
			if _, u := unheardOf(other, uint64(h.Node.ID())); u > 0 {
				t.Fatalf("seed %d: a member that is not the server counts node %d unheard", seed, h.Node.ID())
			}
		}
		waitUntil(t, s, 2*cfg.TurnTicks, "another member sees the dead one's silence", func() bool {
			sil, _ := unheardOf(other, id)
			return sil > 0
		})
	}
}
