package group_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
	"github.com/mcnode/mcnode/internal/syncbuf"
	"github.com/mcnode/mcnode/seal"
	"github.com/mcnode/mcnode/wire"
)

func newKey(t *testing.T) seal.Key {
	t.Helper()
	k, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A keyed group works as an unkeyed one; a node with another key, and a
// node without one, cannot join it (each founds nothing and is refused
// nothing: it hears nothing it can read), and the members count their
// datagrams as drops.
func TestKeyedGroupAdmitsOnlyKeyHolders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(21)
		key := newKey(t)
		gs := joinAll(t, net, 3, key)
		l, err := gs[1].Acquire(context.Background(), "r")
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		for _, outsider := range []struct {
			name string
			keys []seal.Key
			drop string
		}{{"another key", []seal.Key{newKey(t)}, group.DropUnknownKey}, {"no key", nil, group.DropUnsealed}} {
			cfg := memConfig(net)
			cfg.Keys = outsider.keys
			// Free to found a group, past its join timeout: it must not,
			// since the group is there (its locks would not be exclusive
			// with the group's).
			cfg.Bootstrap = true
			var logged syncbuf.Buffer
			cfg.Logger = zerolog.New(&logged)
			ctx, cancel := context.WithTimeout(context.Background(), 5*cfg.JoinTimeout)
			g, err := group.Join(ctx, cfg)
			cancel()
			if err == nil {
				g.Close()
				t.Fatalf("a node with %s joined a keyed group, or founded its own", outsider.name)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a node with %s: %v, want it waiting for the group until its context ends", outsider.name, err)
			}
			// Told to give up when it hears no group, it says it hears one
			// it cannot read.
			cfg.Bootstrap, cfg.NoGroupAfter = false, 3*cfg.JoinTimeout
			cfg.Transport = net.Endpoint() // the failed Join closed the last one
			cfg.Logger = zerolog.Nop()     // the warning is checked below, of the first Join
			if g, err := group.Join(context.Background(), cfg); err == nil {
				g.Close()
				t.Errorf("a node with %s joined a keyed group", outsider.name)
			} else if !errors.Is(err, group.ErrCannotRead) || errors.Is(err, group.ErrNoGroup) {
				t.Errorf("a node with %s, with NoGroupAfter: %v, want ErrCannotRead", outsider.name, err)
			}
			// It says why it hears no group: the group's key is not its
			// key (once, for the many datagrams it could not open).
			if outsider.drop == group.DropUnknownKey {
				out := logged.String()
				if n := strings.Count(out, "sealed with a key this node does not hold"); n != 1 || !strings.Contains(out, seal.FormatID(key.ID())) {
					t.Errorf("the node with another key warned %d times of the group's key %s, want once: %s", n, seal.FormatID(key.ID()), out)
				}
			}
			st, err := gs[0].Status()
			if err != nil {
				t.Fatal(err)
			}
			if st.Stats.Drops[outsider.drop] == 0 || len(st.Members) != 3 {
				t.Errorf("%s: drops %v, %d members", outsider.name, st.Stats.Drops, len(st.Members))
			}
		}
	})
}

// Keys are rotated twice while two callers on every node take one lock
// over and over: each rotation installs the new key on every node, then
// uses it on every node, then removes the old one from every node, one node
// at a time. Every hold is recorded, with its fencing token, from all the
// nodes into one log: no two holders overlap, tokens strictly increase,
// every Acquire is granted and no lease is lost, and grants, releases and
// entries are equal, in the callers' count and in the group's own
// (Stats.Entries and Releases: a grant nobody asked for would show there).
// Locks are taken during every step; no datagram is dropped for its key;
// afterwards a node that holds only a removed key is refused.
func TestKeyRotationLosesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(22)
		net.SetDelay(200 * time.Microsecond)
		keys := []seal.Key{newKey(t), newKey(t), newKey(t)}
		gs := joinAll(t, net, 3, keys[0])
		var holds holdLog
		var stop atomic.Bool
		var acquires, grants, releases atomic.Int64
		var wg sync.WaitGroup
		for i, g := range gs {
			for c := range 2 { // two callers per node: the local queue too
				wg.Add(1)
				go func() {
					defer wg.Done()
					who := fmt.Sprintf("node %d caller %d", i, c)
					for !stop.Load() {
						acquires.Add(1)
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						l, err := g.Acquire(ctx, "r")
						cancel()
						if err != nil {
							t.Errorf("%s: Acquire during rotation: %v", who, err)
							return
						}
						grants.Add(1)
						holds.enter(who, l.Token())
						time.Sleep(time.Millisecond)
						if l.Err() != nil {
							t.Errorf("%s: lease lost during rotation: %v", who, l.Err())
						}
						holds.exit(who, l.Token())
						if err := l.Release(); err != nil {
							t.Errorf("%s: Release: %v", who, err)
							continue
						}
						releases.Add(1)
					}
				}()
			}
		}
		// step changes the ring of every node in turn (in the order given),
		// and requires locks taken while it does. A step that fails ends the
		// rotations (the callers stop, and what they did is checked).
		step := func(what string, order []int, f func(g *group.Group) error) bool {
			t.Helper()
			before := holds.entries()
			for _, i := range order {
				time.Sleep(20 * time.Millisecond) // the members change one by one
				if err := f(gs[i]); err != nil {
					t.Errorf("%s on node %d: %v", what, i, err)
					return false
				}
			}
			time.Sleep(20 * time.Millisecond)
			if n := holds.entries() - before; n < 10 {
				t.Errorf("%s: only %d entries while every node did it", what, n)
			}
			return true
		}
		for r := 1; r < len(keys); r++ {
			old, next := keys[r-1], keys[r]
			if !step(fmt.Sprintf("rotation %d: install", r), []int{0, 1, 2}, func(g *group.Group) error { return g.InstallKey(next) }) ||
				!step(fmt.Sprintf("rotation %d: use", r), []int{2, 0, 1}, func(g *group.Group) error { return g.UseKey(next.ID()) }) ||
				!step(fmt.Sprintf("rotation %d: remove", r), []int{1, 2, 0}, func(g *group.Group) error { return g.RemoveKey(old.ID()) }) {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
		stop.Store(true)
		wg.Wait()

		events := holds.events()
		entries, exits, problems := checkHolds(events)
		for _, p := range problems {
			t.Error(p)
		}
		if acquires.Load() != grants.Load() || grants.Load() != int64(entries) || int64(entries) != int64(exits) || int64(exits) != releases.Load() {
			t.Errorf("%d Acquires, %d granted, %d entries, %d exits, %d releases: want all equal",
				acquires.Load(), grants.Load(), entries, exits, releases.Load())
		}
		if entries < 100 {
			t.Errorf("only %d entries during the rotations", entries)
		}
		// The group's own count: every grant it made went to a caller, and
		// it recorded every release (the last may still be on its way).
		var byGroup group.Stats
		deadline := time.Now().Add(5 * time.Second)
		for {
			byGroup = group.Stats{Drops: map[string]uint64{}}
			for _, g := range gs {
				st, err := g.Status()
				if err != nil {
					t.Fatal(err)
				}
				byGroup.Entries += st.Stats.Entries
				byGroup.Releases += st.Stats.Releases
				for k, v := range st.Stats.Drops {
					byGroup.Drops[k] += v
				}
			}
			if byGroup.Releases >= uint64(releases.Load()) || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if byGroup.Entries != uint64(grants.Load()) || byGroup.Releases != uint64(releases.Load()) {
			t.Errorf("the group counts %d grants and %d releases, the callers %d and %d",
				byGroup.Entries, byGroup.Releases, grants.Load(), releases.Load())
		}
		for _, reason := range []string{group.DropUnsealed, group.DropUnknownKey, group.DropBadMAC} {
			if byGroup.Drops[reason] != 0 {
				t.Errorf("%d datagrams dropped as %s during the rotations (drops %v)", byGroup.Drops[reason], reason, byGroup.Drops)
			}
		}
		t.Logf("%d holds, tokens %d..%d; drops %v", entries, events[0].token, events[len(events)-1].token, byGroup.Drops)

		last := keys[len(keys)-1]
		ids, err := gs[0].Keys()
		if err != nil || len(ids) != 1 || ids[0] != last.ID() {
			t.Errorf("keys after rotation %v, %v", ids, err)
		}
		if err := gs[0].RemoveKey(last.ID()); err == nil {
			t.Error("the primary key was removed")
		}
		for _, removed := range keys[:len(keys)-1] {
			cfg := memConfig(net)
			cfg.Keys = []seal.Key{removed}
			cfg.Bootstrap = false
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if g, err := group.Join(ctx, cfg); err == nil {
				g.Close()
				t.Errorf("a node with the removed %v joined", removed)
			}
			cancel()
		}
	})
}

// holdLog records the holds of one resource from every node, in one
// order: each holder's entry once it holds the lock, and its exit before it
// releases it.
type holdLog struct {
	mu  sync.Mutex
	log []holdEvent
	in  int // entries recorded
}

type holdEvent struct {
	enter bool
	who   string
	token uint64
	at    time.Time
}

func (h *holdLog) enter(who string, token uint64) { h.add(holdEvent{true, who, token, time.Now()}) }
func (h *holdLog) exit(who string, token uint64)  { h.add(holdEvent{false, who, token, time.Now()}) }

func (h *holdLog) add(e holdEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.log = append(h.log, e)
	if e.enter {
		h.in++
	}
}

func (h *holdLog) entries() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.in
}

func (h *holdLog) events() []holdEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.log)
}

// checkHolds checks a hold log: every entry is followed by the exit of the
// same holder with the same token before anyone else enters (no two
// holders overlap), each entry's token is above the one before, and no hold
// is left open. It returns the entries and exits counted, and what is
// wrong.
func checkHolds(events []holdEvent) (entries, exits int, problems []string) {
	var inside *holdEvent
	var lastToken uint64
	for i := range events {
		e := &events[i]
		switch {
		case e.enter && inside != nil:
			problems = append(problems, fmt.Sprintf("two holders: %s entered (token %d) at %v while %s held it (token %d, since %v)",
				e.who, e.token, e.at, inside.who, inside.token, inside.at))
		case e.enter && entries > 0 && e.token <= lastToken:
			problems = append(problems, fmt.Sprintf("token went from %d to %d (%s at %v)", lastToken, e.token, e.who, e.at))
		case !e.enter && (inside == nil || inside.who != e.who || inside.token != e.token):
			problems = append(problems, fmt.Sprintf("%s left (token %d) at %v, and was not the holder", e.who, e.token, e.at))
		}
		if e.enter {
			entries++
			lastToken = max(lastToken, e.token)
			inside = e
		} else {
			exits++
			if inside != nil && inside.who == e.who {
				inside = nil
			}
		}
	}
	if inside != nil {
		problems = append(problems, fmt.Sprintf("%s never left (token %d, since %v)", inside.who, inside.token, inside.at))
	}
	return entries, exits, problems
}

// The hold checker catches each violation it is for, in a log made up for
// it, and passes a sound one.
func TestCheckHoldsCatches(t *testing.T) {
	at := time.Unix(0, 0)
	in := func(who string, token uint64) holdEvent { return holdEvent{true, who, token, at} }
	out := func(who string, token uint64) holdEvent { return holdEvent{false, who, token, at} }
	for _, c := range []struct {
		name   string
		events []holdEvent
		want   string // in a problem; "" for none
	}{
		{"sound", []holdEvent{in("a", 1), out("a", 1), in("b", 5), out("b", 5), in("a", 6), out("a", 6)}, ""},
		{"overlap", []holdEvent{in("a", 1), out("a", 1), in("b", 5), in("a", 6), out("b", 5), out("a", 6)}, "two holders"},
		{"same token twice", []holdEvent{in("a", 5), out("a", 5), in("b", 5), out("b", 5)}, "token went from 5 to 5"},
		{"token back", []holdEvent{in("a", 5), out("a", 5), in("b", 4), out("b", 4)}, "token went from 5 to 4"},
		{"exit of another", []holdEvent{in("a", 1), out("b", 1)}, "was not the holder"},
		{"never left", []holdEvent{in("a", 1), out("a", 1), in("b", 2)}, "never left"},
	} {
		_, _, problems := checkHolds(c.events)
		found := c.want == "" && len(problems) == 0
		for _, p := range problems {
			found = found || c.want != "" && strings.Contains(p, c.want)
		}
		if !found {
			t.Errorf("%s: problems %q, want one with %q", c.name, problems, c.want)
		}
	}
}

func TestKeyOperationsWithoutAKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gs := joinAll(t, memnet.New(23), 1)
		if err := gs[0].InstallKey(newKey(t)); !errors.Is(err, group.ErrNoKey) {
			t.Errorf("InstallKey on an unkeyed node: %v", err)
		}
	})
}

// The log's warning of an unknown key is for this group's datagrams sealed
// with a key the node lacks, once for many. Noise that only looks sealed (a
// header of no version this node speaks) and another group's datagrams
// raise none: a forger could otherwise point it anywhere.
func TestUnknownKeyWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(23)
		cfg := memConfig(net)
		cfg.Keys = []seal.Key{newKey(t)}
		var logged syncbuf.Buffer
		cfg.Logger = zerolog.New(&logged)
		g, err := group.Join(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		codec, err := wire.NewCodec(wire.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		other := newKey(t)
		ring, err := seal.NewRing(other)
		if err != nil {
			t.Fatal(err)
		}
		seq := uint64(0)
		sealedFor := func(name string) []byte {
			data, err := codec.Pack(wire.Header{Group: wire.GroupID(name), From: 9, Inc: 9}, []wire.Message{&wire.Release{Req: 1, Resource: "r"}})
			if err != nil {
				t.Fatal(err)
			}
			seq++
			out, err := ring.Seal(nil, data[0], seal.Multicast, seq)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
		rogue := net.Endpoint()
		send := func(datagrams ...[]byte) {
			var batch []group.Datagram
			for _, d := range datagrams {
				batch = append(batch, group.Datagram{Data: d})
			}
			if err := rogue.Send(batch); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			synctest.Wait()
		}
		const warning = "sealed with a key this node does not hold"
		noise := sealedFor(cfg.Name)
		noise[2]++ // another version: the header names no group
		send(noise, sealedFor("another group"), noise, sealedFor("another group"))
		if out := logged.String(); strings.Contains(out, warning) {
			t.Fatalf("noise and another group's datagrams raised the warning: %s", out)
		}
		send(sealedFor(cfg.Name), sealedFor(cfg.Name), sealedFor(cfg.Name))
		out := logged.String()
		if n := strings.Count(out, warning); n != 1 || !strings.Contains(out, seal.FormatID(other.ID())) {
			t.Fatalf("this group's datagrams under key %s raised %d warnings, want one naming it: %s", seal.FormatID(other.ID()), n, out)
		}
		st, err := g.Status()
		if err != nil {
			t.Fatal(err)
		}
		if st.Stats.Drops[group.DropUnknownKey] < 3 {
			t.Errorf("drops %v, want at least 3 for an unknown key", st.Stats.Drops)
		}
	})
}

// Founding and keys, from a review: a newcomer with a key beside a group
// running without one founds no second group, nor do two newcomers started
// together with different keys found one each; and one forged datagram,
// sealed under a key of the forger's own, only delays a newcomer that may
// found, rather than keep it from founding for good.
func TestFoundingAndKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(31)
		joinAll(t, net, 2) // no key
		cfg := memConfig(net)
		cfg.Keys = []seal.Key{newKey(t)}
		cfg.Bootstrap = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*cfg.JoinTimeout)
		if g, err := group.Join(ctx, cfg); err == nil {
			g.Close()
			t.Error("a newcomer with a key founded a group beside one running without a key")
		}
		cancel()
	})
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(32)
		joined := make(chan *group.Group, 2)
		for range 2 {
			cfg := memConfig(net)
			cfg.Keys = []seal.Key{newKey(t)}
			cfg.Bootstrap = true
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*cfg.JoinTimeout)
				defer cancel()
				g, err := group.Join(ctx, cfg)
				if err != nil {
					g = nil
				}
				joined <- g
			}()
		}
		founded := 0
		for range 2 {
			if g := <-joined; g != nil {
				founded++
				defer g.Close()
			}
		}
		if founded != 1 {
			t.Errorf("two newcomers started together with different keys: %d founded a group, want 1 (the other waits for the key)", founded)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(33)
		cfg := memConfig(net)
		cfg.Keys = []seal.Key{newKey(t)}
		cfg.Bootstrap = true
		codec, err := wire.NewCodec(wire.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		ring, err := seal.NewRing(newKey(t))
		if err != nil {
			t.Fatal(err)
		}
		data, err := codec.Pack(wire.Header{Group: wire.GroupID(cfg.Name), Instance: 7, From: 1, Inc: 7}, []wire.Message{&wire.Ping{}})
		if err != nil {
			t.Fatal(err)
		}
		forged, err := ring.Seal(nil, data[0], seal.Multicast, 1)
		if err != nil {
			t.Fatal(err)
		}
		rogue := net.Endpoint()
		time.AfterFunc(cfg.JoinTimeout/2, func() { _ = rogue.Send([]group.Datagram{{Data: forged}}) })
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*cfg.JoinTimeout)
		defer cancel()
		g, err := group.Join(ctx, cfg)
		if err != nil {
			t.Fatalf("one forged datagram kept a newcomer from founding: %v", err)
		}
		defer g.Close()
		if d := time.Since(start); d < cfg.JoinTimeout+cfg.JoinTimeout/2 {
			t.Errorf("founded after %v, before the forged datagram's delay ran out", d)
		}
	})
}
