package group_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
	"github.com/mcnode/mcnode/internal/netns"
	"github.com/mcnode/mcnode/seal"
	"github.com/mcnode/mcnode/wire"
)

// dropsOf returns a node's drop counts by reason.
func dropsOf(t *testing.T, g *group.Group) map[string]uint64 {
	t.Helper()
	st, err := g.Status()
	if err != nil {
		t.Fatal(err)
	}
	return st.Stats.Drops
}

// Datagrams of another group reach the members on the group address and
// directly: each member counts each it received as foreign-group, and
// nothing else. With a key they are dropped before they are opened, sealed
// (even with the group's own key) or not: no drop of the envelope is
// counted for them.
func TestForeignGroupDropsCounted(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		name := "no key"
		if keyed {
			name = "group key"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				net := memnet.New(41)
				var keys []seal.Key
				if keyed {
					keys = []seal.Key{newKey(t)}
				}
				gs := joinAll(t, net, 2, keys...)
				synctest.Wait()
				rogue := net.Endpoint()
				defer rogue.Close()
				codec, _ := wire.NewCodec(wire.DefaultLimits())
				st, err := gs[1].Status()
				if err != nil {
					t.Fatal(err)
				}
				// A member's header, but another group's ID.
				h := wire.Header{Group: wire.GroupID("another group"), Instance: st.Instance, From: st.Self, Inc: 0xf00, T: st.T, Epoch: st.Epoch, LogEpoch: st.Epoch}
				data, err := codec.Pack(h, []wire.Message{&wire.Request{Resource: "r"}})
				if err != nil {
					t.Fatal(err)
				}
				foreign := [][]byte{data[0]}
				if keyed {
					r, err := seal.NewRing(keys[0])
					if err != nil {
						t.Fatal(err)
					}
					sealed, err := r.Seal(nil, data[0], seal.Multicast, 1)
					if err != nil {
						t.Fatal(err)
					}
					foreign = append(foreign, sealed)
				}
				before := []map[string]uint64{dropsOf(t, gs[0]), dropsOf(t, gs[1])}
				for _, d := range foreign {
					// To the group, and to the first member directly.
					if err := rogue.Send([]group.Datagram{{Data: d}, {To: gs[0].Addr(), Data: d}}); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(100 * time.Millisecond)
				synctest.Wait()
				for i, g := range gs {
					after := dropsOf(t, g)
					want := uint64(len(foreign)) // each multicast
					if i == 0 {
						want *= 2 // and each sent to it directly
					}
					if got := after[group.DropForeignGroup] - before[i][group.DropForeignGroup]; got != want {
						t.Errorf("node %d counted %d foreign-group drops, want %d (drops %v)", i, got, want, after)
					}
					for _, reason := range []string{group.DropMalformed, group.DropForged, group.DropNotMember, group.DropUnsealed, group.DropUnknownKey, group.DropBadMAC, group.DropReplay} {
						if after[reason] != before[i][reason] {
							t.Errorf("node %d counted another group's datagrams as %s too (drops %v)", i, reason, after)
						}
					}
				}
			})
		})
	}
}

// Datagrams larger than MaxDatagram, to the group and to a member
// directly, are dropped by the UDP transport and counted as oversized; one
// of exactly MaxDatagram bytes is not (it is junk, and counted as
// malformed). Over real multicast, in a private network namespace.
func TestOversizedDropsCounted(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := group.DefaultLocalConfig()
	cfg.Name = "oversized-test"
	g, err := group.Join(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	sender := group.ListenLocalUDP(t, 0) // the same group address and interface
	big := func(n int) []byte { return make([]byte, n) }
	batch := []group.Datagram{
		{Data: big(cfg.MaxDatagram + 1)},
		{Data: big(9000)},
		{To: g.Addr(), Data: big(cfg.MaxDatagram + 1)},
		{To: g.Addr(), Data: big(60000)},
		{Data: big(cfg.MaxDatagram)}, // at the limit: read, and malformed
	}
	if err := sender.Send(batch); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		d := dropsOf(t, g)
		if d[group.DropOversized] == 4 && d[group.DropMalformed] == 1 {
			return
		}
		if time.Now().After(deadline) || d[group.DropOversized] > 4 || d[group.DropMalformed] > 1 {
			t.Fatalf("drops %v, want oversized 4 and malformed 1", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
