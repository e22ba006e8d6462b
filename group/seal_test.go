package group_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
	"github.com/mcnode/mcnode/seal"
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
			cfg.Bootstrap = false
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			g, err := group.Join(ctx, cfg)
			cancel()
			if err == nil {
				g.Close()
				t.Fatalf("a node with %s joined a keyed group", outsider.name)
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

// Keys are rotated while every node takes a lock over and over: install
// the new key everywhere, use it everywhere, remove the old one
// everywhere. No Acquire fails, no lease is lost, and afterwards a node that
// holds only the old key is refused.
func TestKeyRotationLosesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(22)
		net.SetDelay(200 * time.Microsecond)
		old, next := newKey(t), newKey(t)
		gs := joinAll(t, net, 3, old)
		var stop atomic.Bool
		var entries atomic.Int64
		var wg sync.WaitGroup
		for _, g := range gs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					l, err := g.Acquire(ctx, "r")
					cancel()
					if err != nil {
						t.Errorf("Acquire during rotation: %v", err)
						return
					}
					time.Sleep(time.Millisecond)
					if l.Err() != nil {
						t.Errorf("lease lost during rotation: %v", l.Err())
					}
					l.Release()
					entries.Add(1)
				}
			}()
		}
		step := func(what string, f func(g *group.Group) error) {
			for _, g := range gs {
				time.Sleep(20 * time.Millisecond) // the members change one by one
				if err := f(g); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
			}
		}
		step("install", func(g *group.Group) error { return g.InstallKey(next) })
		step("use", func(g *group.Group) error { return g.UseKey(next.ID()) })
		step("remove", func(g *group.Group) error { return g.RemoveKey(old.ID()) })
		time.Sleep(100 * time.Millisecond)
		stop.Store(true)
		wg.Wait()
		if entries.Load() < 30 {
			t.Errorf("only %d entries during the rotation", entries.Load())
		}
		ids, err := gs[0].Keys()
		if err != nil || len(ids) != 1 || ids[0] != next.ID() {
			t.Errorf("keys after rotation %v, %v", ids, err)
		}
		if err := gs[0].RemoveKey(next.ID()); err == nil {
			t.Error("the primary key was removed")
		}
		cfg := memConfig(net)
		cfg.Keys = []seal.Key{old}
		cfg.Bootstrap = false
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if g, err := group.Join(ctx, cfg); err == nil {
			g.Close()
			t.Error("a node with the removed key joined")
		}
	})
}

func TestKeyOperationsWithoutAKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gs := joinAll(t, memnet.New(23), 1)
		if err := gs[0].InstallKey(newKey(t)); !errors.Is(err, group.ErrNoKey) {
			t.Errorf("InstallKey on an unkeyed node: %v", err)
		}
	})
}
