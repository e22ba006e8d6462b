package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcnode/mcnode/quorumfallback/protocols"
	"github.com/mcnode/mcnode/quorumfallback/qnet"
)

// startMem starts n nodes of one setup over qnet's in-memory network.
func startMem(t *testing.T, protocol, coterie string, n int) []*Node {
	t.Helper()
	ends := qnet.NewMemNetwork(n)
	peers := make([]string, n)
	for i := range peers {
		peers[i] = fmt.Sprintf("mem-%d", i)
	}
	nodes := make([]*Node, n)
	for i := range nodes {
		nd, err := Start(Config{Group: "t", Protocol: protocol, Coterie: coterie, Self: i, Peers: peers, Transport: ends[i], TryWait: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = nd
		t.Cleanup(func() { nd.Close() })
	}
	return nodes
}

// contend has every node's callers take resource over and over and checks
// that no two hold it at once and that tokens strictly increase.
func contend(t *testing.T, nodes []*Node, callers, rounds int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var inside atomic.Int32
	var mu sync.Mutex
	var last uint64
	var wg sync.WaitGroup
	for _, nd := range nodes {
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					l, err := nd.Acquire(ctx, "r")
					if err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) != 1 {
						t.Error("two holders at once")
					}
					runtime.Gosched() // give an overlap the chance to show
					mu.Lock()
					if l.Token() <= last {
						t.Errorf("token %d after %d", l.Token(), last)
					}
					last = l.Token()
					mu.Unlock()
					inside.Add(-1)
					if err := l.Release(); err != nil {
						t.Error(err)
					}
				}
			}()
		}
	}
	wg.Wait()
}

func TestEveryProtocolExcludes(t *testing.T) {
	for _, p := range protocols.Names() {
		t.Run(p, func(t *testing.T) {
			contend(t, startMem(t, p, "grid", 5), 2, 20)
		})
	}
}

func TestResourcesAreIndependent(t *testing.T) {
	nodes := startMem(t, protocols.Maekawa, "fpp", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := nodes[0].Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := nodes[1].Acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := nodes[0].Status()
	if len(st.Held) != 1 || st.Held[0] != "a" {
		t.Fatalf("node 0 holds %v", st.Held)
	}
	a.Release()
	b.Release()
}

// TryAcquire gives up on a held lock; its request, which the protocols
// cannot withdraw, is granted later and released at once, and the lock
// goes on working.
func TestTryAcquireAndAbandonedGrant(t *testing.T) {
	nodes := startMem(t, protocols.CaoSinghal, "tree", 4)
	ctx := context.Background()
	l, err := nodes[0].Acquire(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[1].TryAcquire(ctx, "r"); !errors.Is(err, ErrLocked) {
		t.Fatalf("TryAcquire of a held lock: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := nodes[2].Acquire(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	l2.Release()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _ := nodes[1].Status()
		if st.Stats.Abandoned == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the abandoned grant was not released: %+v", st.Stats)
		}
		time.Sleep(5 * time.Millisecond)
	}
	l3, err := nodes[1].TryAcquire(ctx, "r")
	if err != nil {
		t.Fatalf("a free lock: %v", err)
	}
	l3.Release()
}

func TestCloseEndsLeasesAndWaiters(t *testing.T) {
	nodes := startMem(t, protocols.Central, "", 2)
	ctx := context.Background()
	l, err := nodes[0].Acquire(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := nodes[0].Acquire(ctx, "r")
		waited <- err
	}()
	time.Sleep(20 * time.Millisecond)
	nodes[0].Close()
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not lost on Close")
	}
	if !errors.Is(l.Err(), ErrLeaseLost) {
		t.Fatalf("Err: %v", l.Err())
	}
	if err := <-waited; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiter: %v", err)
	}
	if _, err := nodes[0].Acquire(ctx, "r"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	ok := Config{Group: "g", Protocol: protocols.Maekawa, Coterie: "fpp", Peers: []string{"a:1", "b:2"}, Transport: qnet.NewMemNetwork(2)[0]}
	for name, mod := range map[string]func(*Config){
		"no group":     func(c *Config) { c.Group = "" },
		"no peers":     func(c *Config) { c.Peers = nil },
		"self":         func(c *Config) { c.Self = 2 },
		"protocol":     func(c *Config) { c.Protocol = "paxos" },
		"coterie":      func(c *Config) { c.Coterie = "ring" },
		"try negative": func(c *Config) { c.TryWait = -1 },
	} {
		c := ok
		mod(&c)
		if _, err := Start(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	n, err := Start(ok)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for _, name := range []string{"", strings.Repeat("x", qnet.MaxResource+1)} {
		if _, err := n.Acquire(context.Background(), name); err == nil || !strings.Contains(err.Error(), "resource name") {
			t.Errorf("resource name of %d bytes: %v", len(name), err)
		}
	}
}

// A node that restarts has lost its arbiter state: the others must not take
// it back, or it would grant a lock that another node holds (here node 0 is
// the only arbiter that node 1's and node 2's grid quorums share).
func TestRestartedNodeCannotGrantTwice(t *testing.T) {
	for _, p := range protocols.Names() {
		t.Run(p, func(t *testing.T) {
			// Every node has seen node 0's first incarnation.
			nodes, peers, start := tcpGroup(t, 3, Config{Group: "t", Protocol: p, Coterie: "grid"})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			held, err := nodes[1].Acquire(ctx, "r")
			if err != nil {
				t.Fatal(err)
			}
			nodes[0].Close()
			l, err := net.Listen("tcp", peers[0])
			if err != nil {
				t.Fatal(err)
			}
			nodes[0] = start(0, l)
			if _, err := nodes[0].TryAcquire(ctx, "r"); !errors.Is(err, ErrNotConnected) && !errors.Is(err, qnet.ErrRestarted) {
				t.Errorf("the restarted node's TryAcquire: %v, want ErrNotConnected or qnet.ErrRestarted", err)
			}
			wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer wcancel()
			if l, err := nodes[2].Acquire(wctx, "r"); err == nil {
				l.Release()
				t.Fatal("node 2 got the lock node 1 holds, from the restarted node 0")
			}
			if err := held.Release(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Over real TCP on loopback: the mesh as the daemon uses it.
func TestOverTCP(t *testing.T) {
	nodes, _, _ := tcpGroup(t, 4, Config{Group: "t", Protocol: protocols.CaoSinghal, Coterie: "fpp"})
	contend(t, nodes, 2, 25)
	st, _ := nodes[0].Status()
	if st.Stats.Entries == 0 || st.Stats.Rejected != 0 {
		t.Fatalf("stats %+v", st.Stats)
	}
}

// tcpGroup starts n nodes configured as cfg (Self, Peers and Listener
// apart) over TCP on loopback, and waits until every link is up. start
// starts node i anew on l, as after a restart.
func tcpGroup(t *testing.T, n int, cfg Config) (nodes []*Node, peers []string, start func(i int, l net.Listener) *Node) {
	t.Helper()
	listeners, peers := loopbackListeners(t, n)
	start = func(i int, l net.Listener) *Node {
		c := cfg
		c.Self, c.Peers, c.Listener = i, peers, l
		nd, err := Start(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		return nd
	}
	nodes = make([]*Node, n)
	for i := range nodes {
		nodes[i] = start(i, listeners[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, nd := range nodes {
		if err := nd.WaitConnected(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return nodes, peers, start
}

// loopbackListeners opens n TCP listeners on 127.0.0.1, on ports the system
// picks, for the nodes' Config.Listener and Peers.
func loopbackListeners(t *testing.T, n int) ([]net.Listener, []string) {
	t.Helper()
	listeners := make([]net.Listener, n)
	peers := make([]string, n)
	for i := range listeners {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listeners[i], peers[i] = l, l.Addr().String()
	}
	return listeners, peers
}

// TestPublishSubscribe: an update reaches every other node once, in order
// per sender, only on the topic subscribed, never the sender itself; a
// topic or data the links cannot carry is refused and sends nothing.
func TestPublishSubscribe(t *testing.T) {
	nodes := startMem(t, "maekawa", "grid", 4)
	subs := make([]<-chan Update, len(nodes))
	for i, nd := range nodes {
		ch, _ := nd.Subscribe("score")
		subs[i] = ch
	}
	all, cancel := nodes[2].Subscribe("")
	for k := range 3 {
		if err := nodes[1].Publish("score", []byte{byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nodes[1].Publish("chat", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		topic string
		data  []byte
	}{{strings.Repeat("t", qnet.MaxResource+1), nil}, {"\xff", nil}, {"score", make([]byte, qnet.MaxData+1)}} {
		if err := nodes[1].Publish(bad.topic, bad.data); !errors.Is(err, ErrBadUpdate) {
			t.Errorf("Publish(%.10q, %d bytes) = %v, want ErrBadUpdate", bad.topic, len(bad.data), err)
		}
	}
	for i, ch := range subs {
		if i == 1 {
			continue
		}
		for k := range 3 {
			select {
			case u := <-ch:
				if u.From != 1 || u.Topic != "score" || len(u.Data) != 1 || u.Data[0] != byte(k) {
					t.Fatalf("node %d: update %d is %+v", i, k, u)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("node %d: update %d never came", i, k)
			}
		}
	}
	var topics []string
	for range 4 {
		select {
		case u := <-all:
			topics = append(topics, u.Topic)
		case <-time.After(5 * time.Second):
			t.Fatalf("the all-topics subscription got only %v", topics)
		}
	}
	if got := strings.Join(topics, ","); got != "score,score,score,chat" {
		t.Errorf("all topics: %s, want score x3 then chat", got)
	}
	select {
	case u := <-subs[1]:
		t.Errorf("the publisher received its own update %+v", u)
	case u := <-subs[0]:
		t.Errorf("node 0 got an update beyond the three: %+v", u)
	case <-time.After(100 * time.Millisecond):
	}
	st, err := nodes[1].Status()
	if err != nil || st.Stats.UpdatesSent != 4*3 {
		t.Errorf("node 1 sent %d update copies (%v), want 12", st.Stats.UpdatesSent, err)
	}
	cancel()
	if _, ok := <-all; ok {
		t.Error("the channel stays open after cancel")
	}
	nodes[0].Close()
	if _, ok := <-subs[0]; ok {
		t.Error("the channel stays open after Close")
	}
}

// TestPublishToADeadPeerIsBounded: updates for a peer that is gone are not
// queued without end: the backlog stops at MaxBacklog, the rest counted.
func TestPublishToADeadPeerIsBounded(t *testing.T) {
	ls := make([]net.Listener, 3)
	peers := make([]string, 3)
	for i := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls[i], peers[i] = l, l.Addr().String()
	}
	var nodes []*Node
	for i := range ls {
		nd, err := Start(Config{Group: "t", Protocol: "ricart-agrawala", Self: i, Peers: peers, Listener: ls[i]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes = append(nodes, nd)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nodes[0].WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	nodes[2].Close()
	data := make([]byte, 1000)
	for range 3 * MaxBacklog {
		if err := nodes[0].Publish("t", data); err != nil {
			t.Fatal(err)
		}
	}
	st, err := nodes[0].Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Stats.UpdatesUnsent < MaxBacklog {
		t.Errorf("%d updates not sent of %d to a dead peer: the rest were queued", st.Stats.UpdatesUnsent, 3*MaxBacklog)
	}
	if _, queued := nodes[0].tr.(backlogged).Backlog(2); queued > MaxBacklog {
		t.Errorf("%d frames queued for the dead peer, want at most %d", queued, MaxBacklog)
	}
}

// Fencing tokens keep increasing when the whole group restarts (every
// machine's counter starts over), for every protocol: a restarted group's
// first token is above the last of the group before. The clock is a fake
// that moves on by a millisecond between the two groups, far more than the
// first group's grants; without the floor the second group would start
// again at 1.
func TestTokensIncreaseAcrossGroupRestarts(t *testing.T) {
	clock := uint64(1_700_000_000_000_000)
	old := tokenFloor
	tokenFloor = func(int) uint64 { return clock }
	t.Cleanup(func() { tokenFloor = old })
	for _, p := range []struct{ protocol, coterie string }{
		{protocols.Maekawa, "grid"}, {protocols.CaoSinghal, "grid"}, {protocols.Kakugawa, "grid"},
		{protocols.RicartAgrawala, ""}, {protocols.Central, ""},
	} {
		t.Run(p.protocol, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var last uint64
			for run := range 2 {
				nodes := startMem(t, p.protocol, p.coterie, 4)
				for i := range 5 {
					l, err := nodes[i%4].Acquire(ctx, "r")
					if err != nil {
						t.Fatal(err)
					}
					if l.Token() <= last || l.Token() <= clock {
						t.Fatalf("group %d, entry %d: token %d after %d (floor %d)", run, i, l.Token(), last, clock)
					}
					last = l.Token()
					if err := l.Release(); err != nil {
						t.Fatal(err)
					}
				}
				for _, nd := range nodes {
					nd.Close()
				}
				clock += 1000 // the next group starts a millisecond later
			}
		})
	}
}

// Two nodes given different peer lists of the same length (here one peer
// spelt differently) refuse each other's links: their quorums are computed
// from node indexes, and only the same list guarantees the same numbering.
// The same nodes with the same list connect (TestOverTCP).
func TestDifferentPeerListsRefuseEachOther(t *testing.T) {
	listeners, peers := loopbackListeners(t, 2)
	other := slices.Clone(peers)
	other[0] = strings.Replace(other[0], "127.0.0.1", "localhost", 1)
	lists := [][]string{peers, other}
	var nodes []*Node
	for i := range 2 {
		nd, err := Start(Config{Group: "t", Protocol: protocols.Maekawa, Coterie: "all", Self: i, Peers: lists[i], Listener: listeners[i]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes = append(nodes, nd)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := nodes[0].WaitConnected(ctx); err == nil {
		t.Fatal("two nodes with different peer lists connected")
	}
	var refused uint64
	for _, nd := range nodes {
		st := nd.tr.(*qnet.Mesh).Stats()
		refused += st.ForeignHello + st.RefusedByPeer
	}
	if refused == 0 {
		t.Fatal("no hello was refused: the links were slow, not refused")
	}
	hello := func(peers ...string) string {
		return Config{Group: "t", Protocol: protocols.Maekawa, Coterie: "all", Peers: peers}.Hello()
	}
	if a, b := hello(peers...), hello(other...); a == b {
		t.Fatalf("the hellos of two peer lists are equal: %s", a)
	}
	// Two spellings of the same addresses are one list.
	if a, b := hello("Node1:7000", "[::ffff:10.0.0.2]:7000"), hello("node1:07000", "10.0.0.2:7000"); a != b {
		t.Errorf("two spellings of one peer list give different hellos: %s, %s", a, b)
	}
}

// A host whose clock runs an hour ahead of the others: its node's tokens
// start an hour ahead, and the next holder's token, from the same quorum
// arbiters, is above them. After the whole group restarts a minute later,
// a holder whose quorum leaves the fast host out (grid, N = 4: node 0 asks
// {0, 1, 2}) would start from the slow clocks and go back an hour; the
// highest token each node saw, kept in its TokenFile, keeps it above.
func TestTokensIncreaseAcrossRestartsWithASkewedClock(t *testing.T) {
	const hour, minute = 3_600_000_000, 60_000_000
	clock := uint64(1_700_000_000_000_000)
	old := tokenFloor
	tokenFloor = func(self int) uint64 {
		if self == 3 {
			return clock + hour
		}
		return clock
	}
	t.Cleanup(func() { tokenFloor = old })
	dir := t.TempDir()
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("token files %v", keep), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var last uint64
			regressed := false
			for run := range 2 {
				ends := qnet.NewMemNetwork(4)
				peers := []string{"mem-0", "mem-1", "mem-2", "mem-3"}
				var nodes []*Node
				for i := range 4 {
					cfg := Config{Group: "t", Protocol: protocols.Maekawa, Coterie: "grid", Self: i, Peers: peers, Transport: ends[i]}
					if keep {
						cfg.TokenFile = fmt.Sprintf("%s/node%d.token", dir, i)
					}
					nd, err := Start(cfg)
					if err != nil {
						t.Fatal(err)
					}
					nodes = append(nodes, nd)
				}
				order := []int{3, 0} // the fast host first, then a slow one
				if run == 1 {
					order = []int{0, 1}
				}
				for _, i := range order {
					l, err := nodes[i].Acquire(ctx, "r")
					if err != nil {
						t.Fatal(err)
					}
					if l.Token() <= last {
						regressed = true
						t.Logf("run %d: node %d got token %d after %d", run, i, l.Token(), last)
					}
					last = max(last, l.Token())
					if err := l.Release(); err != nil {
						t.Fatal(err)
					}
				}
				for _, nd := range nodes {
					nd.Close()
				}
				clock += minute
			}
			if keep && regressed {
				t.Error("a token went back across the restart, with the token files kept")
			}
			if !keep && !regressed {
				t.Error("without token files no token went back: the scenario does not show the skew")
			}
		})
	}
}

// A long-running node meets many resource names. A machine is freed once
// quiescent, at every node, so the machines kept stay those in use; a
// resource used again gets a new machine whose tokens still increase.
func TestIdleMachinesFreed(t *testing.T) {
	for _, p := range protocols.Names() {
		t.Run(p, func(t *testing.T) {
			coterie := ""
			if protocols.UsesCoterie(p) {
				coterie = "majority"
			}
			nodes := startMem(t, p, coterie, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var last uint64
			const names = 300
			for i := range names {
				name := fmt.Sprintf("r%d", i)
				if i%3 == 0 {
					name = "again" // one name used over and over
				}
				nd := nodes[i%len(nodes)]
				l, err := nd.Acquire(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if name == "again" {
					if l.Token() <= last {
						t.Fatalf("token of %q went from %d to %d across freed machines", name, last, l.Token())
					}
					last = l.Token()
				}
				if err := l.Release(); err != nil {
					t.Fatal(err)
				}
			}
			// The last releases reach the arbiters in the background.
			deadline := time.Now().Add(5 * time.Second)
			for {
				kept, freed := 0, uint64(0)
				for _, nd := range nodes {
					st, err := nd.Status()
					if err != nil {
						t.Fatal(err)
					}
					kept += st.Machines
					freed += st.Stats.Freed
				}
				if kept == 0 && freed >= names {
					t.Logf("%d machines freed, none kept", freed)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after %d resources used one at a time: %d machines kept, %d freed", names, kept, freed)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// Without failure handling (Kakugawa's protocol has none), a
// node that is down stalls the requests that need it, not the others:
// with node 4 of 5 gone (majority coterie: node i asks i, i+1 and i+2),
// nodes 0 and 1, whose quorums leave node 4 out, take locks; node 2, whose
// quorum holds it, is told which node it lacks.
func TestNodeDownStallsOnlyTheQuorumsThatHoldIt(t *testing.T) {
	nodes, _, _ := tcpGroup(t, 5, Config{Group: "t", Protocol: protocols.Kakugawa, Coterie: "majority", TryWait: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes[4].Close()
	contend(t, nodes[:2], 2, 10)
	if _, err := nodes[2].TryAcquire(ctx, "x"); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("node 2, whose quorum holds the missing node 4: TryAcquire: %v, want ErrNotConnected", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer wcancel()
	if _, err := nodes[2].Acquire(wctx, "x"); err == nil || !strings.Contains(err.Error(), "[4]") {
		t.Fatalf("node 2: Acquire: %v, want an error naming node 4", err)
	}
}

// A node takes no lock until every node has accepted this incarnation's
// links once: its peers refuse a restarted node only when it dials them and
// only if they saw its earlier incarnation. Here node 0 holds x, and nodes
// 2, 3 and 4 restart together (majority coterie: node 2 asks 2, 3 and 4,
// which never saw its earlier incarnation, and only node 2's arbiter,
// now fresh, is shared with node 0's quorum). Node 2 must not get x.
// (Found by review: with only its quorum's links required, it did.)
func TestPartlyRestartedGroupGrantsNoHeldLock(t *testing.T) {
	// Cao and Singhal's protocol: no failure handling, so the mesh's
	// admission is what keeps node 2 out (see failover_test.go for
	// Maekawa's).
	nodes, peers, start := tcpGroup(t, 5, Config{Group: "t", Protocol: protocols.CaoSinghal, Coterie: "majority"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	held, err := nodes[0].Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{2, 3, 4} {
		nodes[i].Close()
	}
	for _, i := range []int{2, 3, 4} {
		l, err := net.Listen("tcp", peers[i])
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = start(i, l)
	}
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	defer wcancel()
	if l, err := nodes[2].Acquire(wctx, "x"); err == nil {
		l.Release()
		t.Fatalf("restarted node 2 got x (token %d) while node 0 holds it (token %d)", l.Token(), held.Token())
	} else {
		t.Logf("restarted node 2: %v", err)
	}
	// Node 0's quorum holds restarted nodes, whose links echo its
	// heartbeats only once they have connected again: on a loaded host
	// (-race in CI) that may take longer than the lease less the margin,
	// and the lease is then lost, as the failure handling says. Nothing
	// else may go wrong.
	if err := held.Release(); err != nil && !errors.Is(err, ErrLeaseLost) {
		t.Fatal(err)
	}
}

// A restarted node acts on nothing it receives until every node has
// accepted its links, and on nothing once a peer refused it as restarted:
// it lost the arbiter state its peers rely on. Central coordinator 0,
// holder 1, requester 2. Node 2's links to node 1 never get through (a
// proxy in front of node 1 drops them, as a crash before a redial would),
// so node 1 never records node 2's incarnation. Node 1 takes x from
// coordinator 0. Nodes 0 and 2 restart: nobody refuses the new node 2, and
// the new coordinator, refused by node 1, must not grant x to it. (Found by
// review: it did.)
func TestRefusedRestartedArbiterGrantsNothing(t *testing.T) {
	listeners, peers := loopbackListeners(t, 3)
	var block atomic.Bool
	block.Store(true)
	peers[1] = helloProxy(t, peers[1], 2, &block)
	start := func(i int, l net.Listener) *Node {
		nd, err := Start(Config{Group: "t", Protocol: protocols.Central, Self: i, Peers: peers, Listener: l})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		return nd
	}
	nodes := make([]*Node, 3)
	for i := range nodes {
		nodes[i] = start(i, listeners[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, i := range []int{0, 1} {
		if err := nodes[i].WaitConnected(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held, err := nodes[1].Acquire(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	nodes[0].Close()
	nodes[2].Close()
	block.Store(false)
	for _, i := range []int{0, 2} {
		l, err := net.Listen("tcp", listeners[i].Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = start(i, l)
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	defer wcancel()
	if l, err := nodes[2].Acquire(wctx, "x"); err == nil {
		l.Release()
		t.Fatalf("restarted node 2 got x (token %d) from the restarted coordinator while node 1 holds it (token %d)", l.Token(), held.Token())
	} else {
		t.Logf("restarted node 2: %v", err)
	}
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}
}

// helloProxy listens on an address of its own and forwards connections to
// target, but drops those whose qnet hello comes from node from while block
// is set (the hello opens with 4 bytes of magic and the sender's index).
func helloProxy(t *testing.T, target string, from byte, block *atomic.Bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var head [5]byte
				if _, err := io.ReadFull(c, head[:]); err != nil || block.Load() && head[4] == from {
					return
				}
				d, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer d.Close()
				if _, err := d.Write(head[:]); err != nil {
					return
				}
				go func() { _, _ = io.Copy(d, c); d.Close() }()
				_, _ = io.Copy(c, d)
			}()
		}
	}()
	return l.Addr().String()
}

// TryAcquire of a lock another caller of the same node holds answers at
// once, without asking the quorum (it waited TryWait, here an hour); and
// a caller's deadline shorter than TryWait is reported as such, not as
// ErrLocked (found by review).
func TestTryAcquireLocalHolderAndShortDeadline(t *testing.T) {
	ends := qnet.NewMemNetwork(3)
	peers := []string{"mem-0", "mem-1", "mem-2"}
	nodes := make([]*Node, 3)
	for i := range nodes {
		nd, err := Start(Config{Group: "t", Protocol: protocols.Maekawa, Coterie: "majority", Self: i, Peers: peers, Transport: ends[i], TryWait: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = nd
		t.Cleanup(func() { nd.Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := nodes[0].Acquire(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := nodes[0].TryAcquire(ctx, "r")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrLocked) {
			t.Errorf("TryAcquire of a lock another caller of the node holds: %v, want ErrLocked", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("TryAcquire of a lock another caller of the node holds waited for TryWait")
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	if _, err := nodes[1].TryAcquire(short, "r"); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrLocked) {
		t.Errorf("TryAcquire whose own deadline ends first: %v, want context.DeadlineExceeded", err)
	}
	l.Release()
}

// A node that leaves while its request is out waits until the request is
// granted, gives the lock back and only then closes: the protocols cannot
// withdraw a request, and the arbiters handed the lock to the node that
// had gone, where it stayed for good without failure handling (node 2,
// whose quorum leaves node 1 out, never got it; found by review). Calls
// for a lock made while it leaves fail with ErrClosed (one got a lock,
// which the close then dropped unreleased).
func TestLeaveWithARequestOut(t *testing.T) {
	nodes := startMem(t, protocols.Maekawa, "tree", 3)
	if st, _ := nodes[2].Status(); slices.Contains(st.Quorum, 1) {
		t.Fatalf("node 2's quorum %v holds node 1: the test needs one without", st.Quorum)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l0, err := nodes[0].Acquire(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() { _, err := nodes[1].Acquire(ctx, "r"); waiting <- err }()
	time.Sleep(50 * time.Millisecond) // node 1's request is out
	left := make(chan error, 1)
	go func() { left <- nodes[1].Leave(ctx) }()
	if err := <-waiting; !errors.Is(err, ErrClosed) {
		t.Fatalf("the waiter on the node that leaves: %v, want ErrClosed", err)
	}
	if _, err := nodes[1].Acquire(ctx, "other"); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire while the node leaves: %v, want ErrClosed", err)
	}
	if _, err := nodes[1].TryAcquire(ctx, "other"); !errors.Is(err, ErrClosed) {
		t.Errorf("TryAcquire while the node leaves: %v, want ErrClosed", err)
	}
	select {
	case err := <-left:
		t.Fatalf("Leave returned (%v) with its request still out", err)
	case <-time.After(100 * time.Millisecond):
	}
	l0.Release()
	if err := <-left; err != nil {
		t.Fatalf("Leave: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	l2, err := nodes[2].Acquire(short, "r")
	if err != nil {
		t.Fatalf("r, once its holder released it and a waiter's node left: %v", err)
	}
	l2.Release()
}

// Leave's wait ends with its ctx, and it says so: it closed the node
// without the grant of the request it had out.
func TestLeaveUntilItsContextEnds(t *testing.T) {
	nodes := startMem(t, protocols.Maekawa, "tree", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l0, err := nodes[0].Acquire(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	defer l0.Release()
	go func() { _, _ = nodes[1].Acquire(ctx, "r") }()
	time.Sleep(50 * time.Millisecond)
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if err := nodes[1].Leave(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Leave whose context ended with a request out: %v, want context.DeadlineExceeded", err)
	}
	if _, err := nodes[1].Acquire(ctx, "x"); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire after such a Leave: %v, want ErrClosed (the node closed all the same)", err)
	}
}
