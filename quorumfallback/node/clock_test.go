package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcnode/mcnode/group/fence"
	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/protocols"
	"github.com/mcnode/mcnode/quorumfallback/qnet"
)

// clockTap is a node's transport that records the numbers of the REQUESTs
// it sends to each member (one entry per request) and, while poison is
// set, puts that clock on every frame it receives from node from: a broken
// or hostile peer with an encoder of its own.
type clockTap struct {
	qnet.Transport
	from   int
	in     chan qnet.Inbound
	mu     sync.Mutex
	poison uint64 // 0: frames keep their clock
	seqs   map[int][]uint64
}

func newClockTap(tr qnet.Transport, from int) *clockTap {
	c := &clockTap{Transport: tr, from: from, in: make(chan qnet.Inbound), seqs: map[int][]uint64{}}
	go func() {
		defer close(c.in)
		for in := range tr.Inbound() {
			c.mu.Lock()
			if c.poison != 0 && in.From == c.from {
				in.Frame.Clock = c.poison
			}
			c.mu.Unlock()
			c.in <- in
		}
	}()
	return c
}

func (c *clockTap) Inbound() <-chan qnet.Inbound { return c.in }

func (c *clockTap) Send(to int, f qnet.Frame) error {
	if f.Msg.Kind == q.Request {
		c.mu.Lock()
		c.seqs[to] = append(c.seqs[to], f.Msg.Seq)
		c.mu.Unlock()
	}
	return c.Transport.Send(to, f)
}

func (c *clockTap) setPoison(clock uint64) {
	c.mu.Lock()
	c.poison = clock
	c.mu.Unlock()
}

// A frame whose clock is far ahead of the wall clock (a broken or hostile
// peer's) is refused and counted, and no node adopts it. Adopted, a clock
// near 2^64 made the next request's number wrap to 0, after which numbers
// repeated and an answer to a request given up counted for the next one;
// one of MaxCounter left the numbers after it refused by every peer, the
// resource stopped group-wide.
func TestHugeClockFrameRefused(t *testing.T) {
	for _, p := range []string{protocols.Maekawa, protocols.CaoSinghal, protocols.RicartAgrawala} {
		for name, clock := range map[string]uint64{"2^64-1": math.MaxUint64, "MaxCounter": q.MaxCounter, "now+2^61": uint64(time.Now().UnixMicro()) + 1<<61} {
			t.Run(p+"/clock="+name, func(t *testing.T) { hugeClockFrameRefused(t, p, clock) })
		}
	}
}

func hugeClockFrameRefused(t *testing.T, p string, clock uint64) {
	{
		{
			const n = 5
			ends := qnet.NewMemNetwork(n)
			peers := make([]string, n)
			for i := range peers {
				peers[i] = fmt.Sprintf("mem-%d", i)
			}
			nodes, taps := make([]*Node, n), make([]*clockTap, n)
			for i := range nodes {
				taps[i] = newClockTap(ends[i], 4)
				nd, err := Start(Config{Group: "t", Protocol: p, Coterie: "majority", Self: i, Peers: peers, Transport: taps[i], TryWait: 50 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				nodes[i] = nd
				t.Cleanup(func() { nd.Close() })
			}
			contend(t, nodes, 1, 5)
			for _, tap := range taps {
				tap.setPoison(clock)
			}
			// Node 4 asks: every frame it sends carries the clock and is
			// refused, so it waits in vain, as over a link that lost them.
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if _, err := nodes[4].Acquire(ctx, "r"); err == nil {
				t.Fatal("node 4 took the lock with every frame refused")
			}
			for _, tap := range taps {
				tap.setPoison(0)
			}
			rejected := uint64(0)
			for _, nd := range nodes[:4] {
				st, _ := nd.Status()
				rejected += st.Stats.Rejected
			}
			if rejected == 0 {
				t.Error("no frame refused")
			}
			// The others ask once more (the refused frames were lost as on a
			// broken link, and node 4's machine still waits on them, so the
			// locks need not come): the numbers their REQUESTs carry tell
			// whether they took the clock.
			var wg sync.WaitGroup
			for _, nd := range nodes[:4] {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
					defer cancel()
					if l, err := nd.Acquire(ctx, "r"); err == nil {
						_ = l.Release()
					}
				}()
			}
			wg.Wait()
			for i, tap := range taps[:4] {
				tap.mu.Lock()
				for to, seqs := range tap.seqs {
					for k := 1; k < len(seqs); k++ {
						if seqs[k] <= seqs[k-1] {
							t.Errorf("node %d's requests to %d numbered %d after %d", i, to, seqs[k], seqs[k-1])
						}
					}
				}
				tap.mu.Unlock()
			}
		}
	}
}

// A token file that says more than any honest token can be (far ahead of
// the wall clock) stops the node with a clear error: tokens above it would
// be refused by every peer, or wrap.
func TestImplausibleTokenFileRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	if err := fence.Check(file, q.MaxCounter); err != nil {
		t.Fatal(err)
	}
	ends := qnet.NewMemNetwork(2)
	_, err := Start(Config{Group: "t", Protocol: protocols.Maekawa, Coterie: "majority", Self: 0, Peers: []string{"mem-0", "mem-1"}, Transport: ends[0], TokenFile: file})
	t.Log(err)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "token file") || errors.Is(err, q.ErrBadMessage) {
		t.Fatalf("Start with a token file at MaxCounter: %v, want ErrConfig naming the file", err)
	}
}

// A host whose clock was never set (it reads 1970, as many do at boot)
// still takes its peers' counters, which start at their clocks.
func TestUnsetClockTakesPeersCounters(t *testing.T) {
	today := wallMicros()
	old := wallMicros
	wallMicros = func() uint64 { return 0 }
	t.Cleanup(func() { wallMicros = old })
	if err := plausible("a counter", today); err != nil {
		t.Fatalf("a counter at today's clock, on a host that reads 1970: %v", err)
	}
	if err := plausible("a counter", maxAhead+1); !errors.Is(err, errImplausible) {
		t.Fatalf("a counter past the bound: %v", err)
	}
	contend(t, startMem(t, protocols.Maekawa, "grid", 4), 1, 10)
}

// A node whose clock runs decades or centuries ahead starts its counters
// there, and the group goes on: its peers take them. Refused (as with a
// bound of 2^50 microseconds, 35 years), its grants left their requesters
// waiting and its arbiters locked, and the group stopped.
func TestFastClockNodeServed(t *testing.T) {
	for _, ahead := range []uint64{1 << 51, 1 << 58} {
		for _, p := range []string{protocols.Maekawa, protocols.CaoSinghal, protocols.RicartAgrawala} {
			t.Run(fmt.Sprintf("%s/ahead=%d", p, ahead), func(t *testing.T) {
				old := tokenFloor
				tokenFloor = func(self int) uint64 {
					if self == 3 {
						return wallMicros() + ahead
					}
					return wallMicros()
				}
				t.Cleanup(func() { tokenFloor = old })
				nodes := startMem(t, p, "grid", 4)
				contend(t, nodes, 1, 5)
				for i, nd := range nodes {
					if st, _ := nd.Status(); st.Stats.Rejected != 0 {
						t.Errorf("node %d rejected %d frames", i, st.Stats.Rejected)
					}
				}
			})
		}
	}
}
