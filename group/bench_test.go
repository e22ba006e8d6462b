package group_test

import (
	"context"
	"testing"
	"time"

	"github.com/mcnode/mcnode/clock"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
	"github.com/mcnode/mcnode/seal"
)

// sinkToken keeps the benchmarks' results alive.
var sinkToken uint64

// benchJoin starts a node on the in-memory network: with found, it founds
// the group after a short wait for an answer; without, it waits for the
// group and joins it (it never founds a second one).
func benchJoin(b *testing.B, net *memnet.Network, found bool, keys ...seal.Key) *group.Group {
	b.Helper()
	c := memConfig(net)
	c.Keys = keys
	c.JoinTimeout = 50 * time.Millisecond
	c.Bootstrap = found
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := group.Join(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	return g
}

// benchRound acquires and releases "lock-1" on g, and returns the fencing
// token of the grant: the T of the decision, which says which member made
// it.
func benchRound(b *testing.B, g *group.Group) uint64 {
	l, err := g.Acquire(context.Background(), "lock-1")
	if err != nil {
		b.Fatal(err)
	}
	token := l.Token()
	if err := l.Release(); err != nil {
		b.Fatal(err)
	}
	return token
}

// BenchmarkRound times acquire+release rounds through the runtime: its loop
// goroutine, the arbiter machine, the wire codec and the memnet transport,
// on the system clock. One op is Acquire of "lock-1" (returning once this
// node holds it) followed by Release (returning once the machine has it;
// the release's decision, which nobody waits on, rides with the next grant).
//
//   - OneNode: a group of one, its own server. The request is decided
//     locally, with no datagram in; the decisions go out through the
//     transport (to nobody).
//   - TwoNodes: the requester is never the server. Its Request goes out
//     through memnet, into the server's transport; the server steps it and
//     multicasts the Grant, which comes back in through the requester's
//     transport. The server role rotates every turn, so each round is made
//     by the member that will not be serving it, predicted from the turn
//     schedule and the last grant's T; a round that the requester decided
//     itself fails the benchmark. A round whose grant may fall on a turn's
//     last timestamp, where either member may decide it, is not timed.
//   - TwoNodesKeyed: the same with a group key: every datagram sealed and
//     opened (package seal).
//
// TwoNodes and TwoNodesKeyed report the bytes of the datagrams the nodes
// sent during the rounds, per datagram (B/datagram): side by side, what the
// envelope adds (seal.Overhead).
func BenchmarkRound(b *testing.B) {
	b.Run("OneNode", func(b *testing.B) {
		g := benchJoin(b, memnet.New(1), true)
		benchRound(b, g) // warm up: the node's loop, the resource's first grant
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			sinkToken = benchRound(b, g)
		}
	})
	b.Run("TwoNodes", func(b *testing.B) { benchTwoNodes(b) })
	b.Run("TwoNodesKeyed", func(b *testing.B) {
		key, err := seal.GenerateKey()
		if err != nil {
			b.Fatal(err)
		}
		benchTwoNodes(b, key)
	})
}

// benchTwoNodes runs the TwoNodes rounds, with the datagrams sealed if keys
// are given.
func benchTwoNodes(b *testing.B, keys ...seal.Key) {
	{
		net := memnet.New(2)
		nodes := []*group.Group{benchJoin(b, net, true, keys...), benchJoin(b, net, false, keys...)}
		ids := []group.NodeID{nodes[0].ID(), nodes[1].ID()}
		// The group's turn length is the founder's: memConfig keeps the
		// default.
		sched, err := clock.NewSchedule(ids, uint64(group.DefaultLocalConfig().TurnLength))
		if err != nil {
			b.Fatal(err)
		}
		// requester returns the member that will not be server for the
		// next grant, which follows the release of the grant at token: the
		// release takes token+1 at the earliest, and a turn's last
		// timestamp goes to its SYNC.
		requester := func(token uint64) int {
			next := token + 2
			if sched.IsLastSlot(next) {
				next++
			}
			if srv, _ := sched.ServerAt(next); srv == ids[0] {
				return 1
			}
			return 0
		}
		// Warm up until the turn has been handed over once: the founder's
		// first turn began off the schedule's boundaries, and may end
		// before them; every later turn starts at its first timestamp.
		token := benchRound(b, nodes[0])
		first, _ := sched.ServerAt(token)
		for n := 0; ; n++ {
			if by, _ := sched.ServerAt(token); by != first {
				break
			}
			if n == 1000 {
				b.Fatal("no turn hand-over in 1000 rounds")
			}
			token = benchRound(b, nodes[requester(token)])
		}
		// A grant two timestamps on may fall on a turn's last one: decided
		// there by the turn's server, or after the SYNC by the next; of two
		// members neither is sure not to be its server, so such a round is
		// made outside the timer and not counted.
		boundary := func(token uint64) bool { return sched.IsLastSlot(token + 2) }
		selfServed := 0
		bytes0, datagrams0 := sentBy(b, nodes)
		b.ReportAllocs()
		b.ResetTimer()
		for timed := 0; timed < b.N; {
			i := requester(token)
			if boundary(token) {
				b.StopTimer()
				token = benchRound(b, nodes[i])
				b.StartTimer()
				continue
			}
			token = benchRound(b, nodes[i])
			timed++
			if by, _ := sched.ServerAt(token); by == ids[i] {
				selfServed++
			}
		}
		b.StopTimer()
		sinkToken = token
		if bytes, datagrams := sentBy(b, nodes); datagrams > datagrams0 {
			b.ReportMetric(float64(bytes-bytes0)/float64(datagrams-datagrams0), "B/datagram")
		}
		if selfServed > 0 {
			b.Fatalf("%d of %d rounds were decided by the requester itself", selfServed, b.N)
		}
	}
}

// sentBy returns the bytes and datagrams the nodes have sent (a multicast
// counts once).
func sentBy(b *testing.B, nodes []*group.Group) (bytes, datagrams uint64) {
	b.Helper()
	for _, g := range nodes {
		st, err := g.Status()
		if err != nil {
			b.Fatal(err)
		}
		bytes += st.Stats.SentBytes
		for _, n := range st.Stats.Sent {
			datagrams += n
		}
	}
	return bytes, datagrams
}
