package group_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/localgroup"
	"github.com/mcnode/mcnode/internal/netns"
)

// Five nodes in one process over real UDP multicast (on the loopback
// interface of a private network namespace) contend for three resources for
// a few seconds: no two holders of a resource overlap, every Acquire is
// served, and the datagrams per entry are what the simulation predicts.
// The group is started and driven by package localgroup, as the demo and
// the benchmark start theirs.
func TestUDPMulticastFiveNodes(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lg, err := localgroup.Start(ctx, localgroup.Options{N: 5}) // multicast on lo, group.DefaultLocalConfig
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	before := lg.Traffic()
	r := localgroup.Drive(lg.Nodes, localgroup.Workload{Locks: 3, Prefix: "r", Hold: 300 * time.Microsecond, Duration: 3 * time.Second}, nil)
	traffic := lg.Traffic()
	core, other := traffic.Core-before.Core, traffic.Membership-before.Membership
	var filtered uint64
	for _, n := range lg.Nodes {
		st, err := mcnode.Unwrap(n).(*group.Group).Status()
		if err != nil {
			t.Fatal(err)
		}
		if st.Stats.Malformed+st.Stats.Foreign+st.Stats.Forged+st.Stats.Drops[group.DropOverflow] > 0 {
			t.Errorf("node %d dropped datagrams: %+v", st.Self, st.Stats)
		}
		filtered += st.Stats.Filtered
	}
	perEntry := float64(core) / float64(r.Entries)
	t.Logf("%d entries in %v over real multicast (%.0f/s), %d overlaps, %.3f datagrams per entry (request+grant+release), %.3f membership, %.2f copies per entry left unread by the socket filters",
		r.Entries, r.Elapsed.Round(time.Millisecond), float64(r.Entries)/r.Elapsed.Seconds(), r.Overlaps, perEntry, float64(other)/float64(r.Entries), float64(filtered)/float64(r.Entries))
	if filtered == 0 {
		t.Errorf("no member's socket filter dropped a request or release addressed to others")
	}
	if r.Overlaps > 0 || r.Err != nil || r.Entries == 0 {
		t.Fatalf("%d overlaps, error %v, %d entries", r.Overlaps, r.Err, r.Entries)
	}
	if perEntry > 3 {
		t.Errorf("%.3f datagrams per entry; the simulation at heavy load gives at most 3", perEntry)
	}
}

// A newcomer joins a group holding 10,000 locks over real UDP: the state
// transfer is a burst of about 250 datagrams from one member, which the
// newcomer's socket must hold while it is busy (the socket buffers are set
// for that). Three newcomers in turn, each within the join timeout.
func TestUDPJoinLargeState(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 locks")
	}
	if !netns.Isolate(t) {
		return
	}
	const locks = 10000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := group.DefaultLocalConfig()
	cfg.Name = "udp-big-state"
	// The burst waits in the newcomer's socket buffer: only as root (or
	// with net.core.rmem_max raised) does the kernel grant the one asked.
	ifi, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		t.Fatal(err)
	}
	probe, err := group.ListenUDP(group.UDPConfig{Group: netip.MustParseAddrPort(cfg.Address), Interface: ifi, Loopback: true})
	if err != nil {
		t.Fatal(err)
	}
	granted, asked := probe.ReceiveBuffer()
	probe.Close()
	if granted < asked {
		t.Skipf("skipped: the kernel grants a %d-byte socket receive buffer here, not %d (run as root, or raise net.core.rmem_max)", granted, asked)
	}
	var gs []*group.Group
	for i := 0; i < 2; i++ {
		g, err := group.Join(ctx, cfg)
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		defer g.Close()
		gs = append(gs, g)
	}
	leases := holdMany(t, ctx, gs, locks, "held-by-the-group")
	// A newcomer joins the group, and never founds another if the group is
	// slow to answer.
	ncfg := cfg
	ncfg.Bootstrap = false
	for i := 0; i < 3; i++ {
		start := time.Now()
		jctx, jcancel := context.WithTimeout(ctx, 20*time.Second)
		g, err := group.Join(jctx, ncfg)
		jcancel()
		if err != nil {
			t.Fatalf("newcomer %d: cannot join a group holding %d locks: %v", i, locks, err)
		}
		st, err := g.Status()
		if err != nil {
			t.Fatal(err)
		}
		// A lease lost (a loaded host) frees its lock once the release is
		// decided: until then the state still holds it.
		gone := lost(leases)
		t.Logf("newcomer %d joined in %v, knowing %d resources; drops %v; the group's leases lost so far: %d", i, time.Since(start).Round(time.Millisecond), len(st.Resources), st.Stats.Drops, gone)
		if len(st.Resources) < locks-gone {
			t.Errorf("newcomer %d knows %d resources, the group holds at least %d", i, len(st.Resources), locks-gone)
		}
		if err := g.Leave(ctx); err != nil {
			t.Errorf("newcomer %d: leave: %v", i, err)
		}
	}
}

// Datagrams the kernel drops because the node fell behind its socket (the
// receive buffer full) are counted as overflow: the kernel tells with the
// next datagram it delivers.
func TestUDPKernelDropsCounted(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	u := group.ListenLocalUDP(t, 4096)
	stall, got := make(chan struct{}), make(chan int, 1024)
	var once sync.Once
	u.SetHandler(func(ps []group.Packet) {
		once.Do(func() { <-stall }) // the node falls behind
		got <- len(ps)
	})
	src, err := net.Dial("udp4", u.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	payload := make([]byte, 1000)
	for range 300 {
		_, _ = src.Write(payload)
	}
	close(stall)
	// Read until a datagram sent after the flood has come through.
	deadline := time.After(10 * time.Second)
	for u.Drops()[group.DropOverflow] == 0 {
		_, _ = src.Write(payload)
		select {
		case <-got:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("a flood into a 4 KiB socket buffer while the node stalled: drops %v", u.Drops())
		}
	}
	t.Logf("drops %v", u.Drops())
}

// The kernel loops every multicast back to every group socket on the host:
// the other nodes' and the sender's own. The sender's own copy is dropped
// by a socket filter before it wakes the sender (the transport counts
// none of them received), while another node's multicast, from the
// same address and another port, comes through to both. The own copies the
// filter dropped are not counted as drops.
func TestUDPOwnMulticastDroppedInTheKernel(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	listen := func() (*group.UDP, chan group.Packet) {
		u := group.ListenLocalUDP(t, 0)
		got := make(chan group.Packet, 64)
		u.SetHandler(func(ps []group.Packet) {
			for _, p := range ps {
				got <- p
			}
		})
		return u, got
	}
	a, gotA := listen()
	b, gotB := listen()
	expect := func(got chan group.Packet, who, from, want string) {
		t.Helper()
		select {
		case p := <-got:
			if string(p.Data) != want || p.Source != from || !p.Multicast {
				t.Fatalf("%s received %q from %s (multicast %v), want %q from %s", who, p.Data, p.Source, p.Multicast, want, from)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not receive %q from %s", who, want, from)
		}
	}
	// One at a time: each waits for the reader to have emptied its socket
	// (which then waits for the poller without a read; see readBatch).
	const sends = 200
	for i := range sends {
		msg := fmt.Sprintf("from a %d", i)
		if err := a.Send([]group.Datagram{{Data: []byte(msg)}}); err != nil {
			t.Fatal(err)
		}
		expect(gotB, "b", a.LocalAddr(), msg)
	}
	if err := b.Send([]group.Datagram{{Data: []byte("from b")}}); err != nil {
		t.Fatal(err)
	}
	expect(gotA, "a", b.LocalAddr(), "from b")
	select {
	case p := <-gotA:
		t.Fatalf("a received %q from %s besides b's datagram: its own multicast came back", p.Data, p.Source)
	case <-time.After(100 * time.Millisecond):
	}
	if n := a.Stats().Received; n != 1 {
		t.Fatalf("a's transport received %d datagrams, want 1 (b's): its own %d multicasts reached it", n, sends)
	}
	// The kernel counts what the filter drops with what it drops for want
	// of buffer, and reports that count with b's datagram: a's own are no
	// overflow.
	if d := a.Drops()[group.DropOverflow]; d != 0 {
		t.Fatalf("a counts %d datagrams dropped for want of buffer: its own %d filtered multicasts", d, sends)
	}
}
