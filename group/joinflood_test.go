package group_test

import (
	"context"
	"math/rand"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/netns"
	"github.com/mcnode/mcnode/wire"
)

// TestJoinFloodFromManyPorts floods a group without a key, on real
// multicast, with join requests from 300 ports of one host, each sent three
// times 20 ms apart and nothing else, as a black-box attack on real daemons
// did: that stopped a group of 5 for good (it admitted 5 voters that never
// answered, and with half of it silent could remove none). Locks taken in
// turn by every member must keep flowing through the flood and after it,
// the group must never count more than one voter beyond its own, and the
// forged members must all be removed.
func TestJoinFloodFromManyPorts(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := group.DefaultLocalConfig()
	cfg.Name = "join-flood"
	cfg.Address = "239.192.77.5:7946"
	const members = 5
	gs := joinReal(t, ctx, cfg, members)
	rogue := newRogue(t, cfg)
	deadline := time.Now().Add(5 * time.Second)
	var h wire.Header
	for {
		rogue.mu.Lock()
		for _, hdr := range rogue.headers {
			h = hdr
		}
		rogue.mu.Unlock()
		if h.From != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rogue heard no member in 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}

	loop := startLockLoop(t, ctx, gs)
	defer func() {
		cancel() // a group that stopped would hold the loops' Acquire
		loop.halt()
	}()
	entries := &loop.entries

	// The most voters any member counts, sampled through the flood.
	var mostVoters atomic.Int64
	go func() {
		for {
			select {
			case <-loop.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			for _, g := range gs {
				st, err := g.Status()
				if err != nil {
					continue
				}
				v := 0
				for _, m := range st.Members {
					if !m.Observer {
						v++
					}
				}
				if int64(v) > mostVoters.Load() {
					mostVoters.Store(int64(v))
				}
			}
		}
	}()

	ifi, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		t.Fatal(err)
	}
	to, err := net.ResolveUDPAddr("udp4", cfg.Address)
	if err != nil {
		t.Fatal(err)
	}
	codec, _ := wire.NewCodec(wire.DefaultLimits())
	rng := rand.New(rand.NewSource(1))
	before := entries.Load()
	var flood sync.WaitGroup
	for f := 0; f < 300; f++ {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if err := ipv4.NewPacketConn(c).SetMulticastInterface(ifi); err != nil {
			t.Fatal(err)
		}
		fh := h
		fh.From, fh.Inc = 0, rng.Uint64()|1
		data, err := codec.Pack(fh, []wire.Message{&wire.JoinRequest{Inc: fh.Inc, Addr: c.LocalAddr().String()}})
		if err != nil {
			t.Fatal(err)
		}
		flood.Add(1)
		go func() {
			defer flood.Done()
			defer c.Close()
			for range 3 {
				for _, d := range data {
					_, _ = c.WriteToUDP(d, to)
				}
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(time.Second) // the port stays open, as the attack's did, and answers nothing
		}()
		time.Sleep(20 * time.Millisecond)
	}
	flood.Wait()
	during := entries.Load() - before

	deadline = time.Now().Add(30 * time.Second)
	for {
		removed := true
		for _, g := range gs {
			if st, err := g.Status(); err != nil || len(st.Members) != members {
				removed = false
			}
		}
		if removed {
			break
		}
		if time.Now().After(deadline) {
			st, _ := gs[0].Status()
			t.Fatalf("30 s after the flood, a member still counts %d members (want %d): the forged ones are not all removed", len(st.Members), members)
		}
		time.Sleep(20 * time.Millisecond)
	}
	after := entries.Load()
	time.Sleep(200 * time.Millisecond)
	if entries.Load() == after {
		t.Error("no lock granted in 200 ms after the flood")
	}
	if during < 50 {
		t.Errorf("%d critical sections in the flood's 6 s", during)
	}
	if v := mostVoters.Load(); v > members+1 {
		t.Errorf("a member counted %d voters during the flood: more than one forged", v)
	}
	loop.halt()
	loop.checkOverlaps(t)
	t.Logf("%d critical sections during the flood, at most %d voters", during, mostVoters.Load())
}
