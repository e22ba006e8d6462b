package group_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
	"github.com/mcnode/mcnode/wire"
)

// A join that nobody answers gives up after NoGroupAfter with ErrNoGroup.
func TestJoinGivesUpWhenNoGroupAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := memConfig(memnet.New(1))
		cfg.Bootstrap = false
		cfg.NoGroupAfter = 3 * cfg.JoinTimeout
		var hook atomic.Pointer[func() (group.Status, error)]
		cfg.Joining = func(f func() (group.Status, error)) { hook.Store(&f) }
		status := func() (group.Status, error) { return (*hook.Load())() }
		time.AfterFunc(cfg.NoGroupAfter/2, func() {
			// Config.Joining: while it joins, the node tells what it heard.
			if st, err := status(); err != nil || st.Joined || st.HeardGroup || st.Group != cfg.Name {
				t.Errorf("status while joining a group nobody answers for: %+v, %v", st, err)
			}
		})
		start := time.Now()
		_, err := group.Join(context.Background(), cfg)
		if !errors.Is(err, group.ErrNoGroup) {
			t.Fatalf("Join = %v, want ErrNoGroup", err)
		}
		if d := time.Since(start); d != cfg.NoGroupAfter {
			t.Errorf("gave up after %v, want %v", d, cfg.NoGroupAfter)
		}
		if _, err := status(); err == nil {
			t.Error("the status of a node whose join gave up has no error")
		}
	})
}

// A group that answered but does not admit the newcomer yet (here its
// state never arrives; in life a takeover's wait) is waited for past
// NoGroupAfter, until the caller's context ends, and the join succeeds
// once the group lets the newcomer in.
func TestJoinWaitsForAGroupThatAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(1)
		joinAll(t, net, 2)
		cfg := memConfig(net)
		cfg.Bootstrap = false
		cfg.NoGroupAfter = 3 * cfg.JoinTimeout
		gate := &stateGate{Transport: cfg.Transport, out: make(chan group.Packet, 1024)}
		go gate.forward()
		cfg.Transport = gate
		admitAt := 5 * cfg.NoGroupAfter
		time.AfterFunc(admitAt, func() { gate.open.Store(true) })
		var hook atomic.Pointer[func() (group.Status, error)]
		cfg.Joining = func(f func() (group.Status, error)) { hook.Store(&f) }
		status := func() (group.Status, error) { return (*hook.Load())() }
		time.AfterFunc(admitAt/2, func() {
			if st, err := status(); err != nil || st.Joined || !st.HeardGroup || len(st.Members) != 0 {
				t.Errorf("status while the group holds the newcomer back: %+v, %v; want heard, not a member", st, err)
			}
		})
		start := time.Now()
		g, err := group.Join(context.Background(), cfg)
		if err != nil {
			t.Fatalf("Join = %v after %v, want a member once the state arrives at %v", err, time.Since(start), admitAt)
		}
		defer g.Close()
		if d := time.Since(start); d < admitAt {
			t.Errorf("joined after %v, before the state could arrive (%v)", d, admitAt)
		}
		if st, err := status(); err != nil || !st.Joined || len(st.Members) != 3 {
			t.Errorf("status once joined: %+v, %v", st, err)
		}
	})
}

// stateGate passes a transport's packets on, except state transfers until
// open: the newcomer hears the group but cannot become a member.
type stateGate struct {
	group.Transport
	open atomic.Bool
	out  chan group.Packet
}

func (s *stateGate) Packets() <-chan group.Packet { return s.out }

func (s *stateGate) forward() {
	defer close(s.out)
	codec, _ := wire.NewCodec(wire.DefaultLimits())
	for p := range s.Transport.Packets() {
		if !s.open.Load() {
			if d, err := codec.Decode(p.Data); err == nil && hasKind(d.Messages, wire.KindStateChunk) {
				continue
			}
		}
		s.out <- p
	}
}

func hasKind(ms []wire.Message, k wire.Kind) bool {
	for _, m := range ms {
		if m.Kind() == k {
			return true
		}
	}
	return false
}

// Nodes started at the same moment, each free to found the group (the
// default), found one group between them, not one each: each would grant
// the same locks. (They did, found by an embedder's test.)
func TestNodesStartedTogetherFoundOneGroup(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		synctest.Test(t, func(t *testing.T) {
			net := memnet.New(seed)
			const n = 3
			gs := make([]*group.Group, n)
			errs := make(chan error, n)
			for i := range gs {
				cfg := memConfig(net)
				cfg.Bootstrap = true
				go func() {
					var err error
					gs[i], err = group.Join(context.Background(), cfg)
					errs <- err
				}()
			}
			for range gs {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			defer func() {
				for _, g := range gs {
					g.Close()
				}
			}()
			time.Sleep(5 * memConfig(net).JoinTimeout) // the members greet each other
			instances := map[uint64]int{}
			for _, g := range gs {
				st, err := g.Status()
				if err != nil {
					t.Fatal(err)
				}
				instances[st.Instance]++
			}
			if len(instances) != 1 {
				t.Fatalf("seed %d: %d nodes started together founded %d groups: %v", seed, n, len(instances), instances)
			}
		})
	}
}

// A newcomer free to found that starts while the group changes servers
// (the server cut off, the others silent until one claims) joins the group
// once it has a new server, instead of founding a second one, even with a
// join timeout shorter than the takeover timeout. It founded, every run,
// in a review.
func TestNewcomerDuringATakeoverJoins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(41)
		gs := joinAll(t, net, 3)
		var server *group.Group
		for _, g := range gs {
			if st, err := g.Status(); err == nil && st.IsServer {
				server = g
			}
		}
		if server == nil {
			t.Fatal("no server")
		}
		instance := func(g *group.Group) uint64 {
			st, err := g.Status()
			if err != nil {
				t.Fatal(err)
			}
			return st.Instance
		}
		want := instance(gs[0])
		net.Isolate(server.Addr(), true)
		time.Sleep(200 * time.Millisecond) // the last ping is out; silence
		cfg := memConfig(net)
		cfg.Bootstrap = true
		if cfg.JoinTimeout >= cfg.TakeoverTimeout {
			t.Fatalf("the case needs a join timeout (%v) below the takeover timeout (%v)", cfg.JoinTimeout, cfg.TakeoverTimeout)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		g, err := group.Join(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		if got := instance(g); got != want {
			t.Fatalf("the newcomer is in instance %x, the group's is %x: it founded a second group during the takeover", got, want)
		}
	})
}
