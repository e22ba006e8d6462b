package arbiter_test

import (
	"fmt"
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

// A member cut off for longer than a lease, whom the group removed, hears
// pings only from servers it does not know, taking turns (forged here:
// nobody answers its requests for the state). It asks each, counting from
// its first ask, and rejoins once none has sent the state within the retry
// intervals it allows: counting again for each new server, it never did
// while two alternated. (Found by review.)
func TestStrandedAmongAlternatingStrangersRejoins(t *testing.T) {
	for _, servers := range [][]wire.NodeID{{10}, {10, 11}, {10, 11, 12}} {
		s := newGroup(t, 3, 77, nil)
		_, _, others := roles(t, s)
		v := others[0]
		isolate(s, v)
		s.RunTicks(400) // past the lease: the group removes it
		for i := 0; i < 40 && !v.Node.Stopped(); i++ {
			id := servers[i%len(servers)]
			h := memberHeader(v)
			h.From, h.Inc = id, 0xbad0+uint64(id)
			h.T += 1000
			h.LogEpoch++
			h.Epoch++
			_ = v.Node.Step(fmt.Sprintf("stranger:%d", id), h, &wire.Ping{Turn: h.T, Probe: 1, Reachable: 3})
			s.Flush(v)
			s.RunTicks(15)
		}
		if !v.Node.Stopped() || !hasEvent(v, arbiter.EventRemoved) {
			t.Errorf("%d unknown servers taking turns: the stranded node neither rejoined nor reported its removal (stopped %v)", len(servers), v.Node.Stopped())
		}
	}
}

// The same in a running group: v is cut off and removed, two hosts join, and
// the two members v knew leave; on healing, v hears only the newcomers,
// which serve in turn under load. The one it asks for the state answers that
// v is no member of its view, which, from the server it asked, with a group
// key, v takes for its removal at once.
func TestStrandedAmongRotatingStrangersLearnsItsRemoval(t *testing.T) {
	offline := true
	s := simtest.New(simtest.Options{Seed: 41, Hosts: 5, Trace: traceTo(t), Drop: func(d *simtest.Datagram) bool {
		return offline && (d.From >= 3 || d.To >= 3)
	}})
	waitUntil(t, s, 300, "three joined", func() bool {
		return s.Hosts[0].Node.Joined() && s.Hosts[1].Node.Joined() && s.Hosts[2].Node.Joined()
	})
	_, _, others := roles(t, s)
	v := others[0]
	isolate(s, v)
	offline = false
	waitUntil(t, s, 2000, "the newcomers joined and v was removed", func() bool {
		srv := server(s)
		return s.Hosts[3].Node.Joined() && s.Hosts[4].Node.Joined() && srv != nil && len(srv.Node.Members()) == 4
	})
	var old []*simtest.Host
	for _, h := range s.Hosts[:3] {
		if h != v {
			old = append(old, h)
			if err := h.Node.Leave(); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitUntil(t, s, 2000, "the old members left", func() bool { return old[0].Node.Stopped() && old[1].Node.Stopped() })
	s.Heal()
	healed := s.Tick()
	for i := 0; i < 300 && !v.Node.Stopped(); i++ {
		churn(s, s.Hosts[3:], 8)
		s.RunTicks(1)
	}
	if !hasEvent(v, arbiter.EventRemoved) {
		t.Fatalf("v, removed by the group, did not learn it within 300 ticks of the heal")
	}
	t.Logf("v learned its removal %d ticks after the heal", s.Tick()-healed)
	checkClean(t, s)
}

// isolate cuts every link to and from v.
func isolate(s *simtest.Sim, v *simtest.Host) {
	for _, h := range s.Hosts {
		if h != v {
			s.Cut(h.Index, v.Index)
			s.Cut(v.Index, h.Index)
		}
	}
}
