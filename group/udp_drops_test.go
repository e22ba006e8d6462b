package group

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcnode/mcnode/internal/netns"
	"github.com/mcnode/mcnode/wire"
	"golang.org/x/sys/unix"
)

// The kernel counts the node's own multicasts, which the socket filter
// drops, with its drops for want of buffer, and the node subtracts them.
// The real drops must still all be counted, with the eBPF filter (which
// counts what it drops) and with the classic one (a process without
// CAP_BPF: each multicast sent stands for the copy dropped), after
// multicasts that failed to go out (which the filter never saw). A flood
// into a stalled node's 4 KiB buffer: every datagram the node did not
// receive is counted as overflow.
func TestUDPMulticastDropsCountedBesideOwnFiltered(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	t.Run("ebpf", testMulticastDropsCountedBesideOwnFiltered)
	t.Run("classic", func(t *testing.T) {
		useEBPF = false
		defer func() { useEBPF = true }()
		testMulticastDropsCountedBesideOwnFiltered(t)
	})
}

func testMulticastDropsCountedBesideOwnFiltered(t *testing.T) {
	a, b := listenLocalUDP(t, 4096), listenLocalUDP(t, 0)
	if !a.filtersOwn {
		t.Fatal("no socket filter on the multicast socket")
	}
	if err := a.FilterFor(5); (err == nil) != useEBPF { // the address filter too, as a member's, where it may
		t.Fatalf("FilterFor with eBPF %v: %v", useEBPF, err)
	}
	for range 1000 {
		// Too big for a datagram: each fails, and the filter sees none.
		if err := a.Send([]Datagram{{Data: make([]byte, 70000)}}); err == nil {
			t.Fatal("a 70,000-byte datagram went out")
		}
	}
	for range 3 {
		if err := a.Send([]Datagram{{Data: []byte("own")}}); err != nil {
			t.Fatal(err)
		}
	}
	release, received := stallReader(t, a)
	payload := make([]byte, 1000)
	sent := 0
	for range 300 {
		if err := b.Send([]Datagram{{Data: payload}}); err != nil {
			t.Fatal(err)
		}
		sent++
	}
	release()
	// Send until the count carried by what a receives covers the flood.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := b.Send([]Datagram{{Data: payload}}); err != nil {
			t.Fatal(err)
		}
		sent++
		time.Sleep(20 * time.Millisecond)
		lost := sent - received()
		if got := a.Drops()[DropOverflow]; got == uint64(lost) && lost > 0 {
			t.Logf("%d datagrams sent, %d lost, %d counted", sent, lost, got)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d datagrams lost into a stalled 4 KiB buffer, %d counted as overflow", lost, a.Drops()[DropOverflow])
		}
	}
}

// Multicast datagrams addressed to other members are dropped by the socket
// filter before they reach the node, and counted as filtered, not as
// overflow; a member they name, and every member when they name none, gets
// them; FilterFor(0) lets everything through again.
func TestUDPAddressedDroppedInTheKernel(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	a, b, c := listenLocalUDP(t, 0), listenLocalUDP(t, 0), listenLocalUDP(t, 0)
	got := func(u *UDP) chan Packet {
		ch := make(chan Packet, 1024)
		u.SetHandler(func(ps []Packet) {
			for _, p := range ps {
				ch <- p
			}
		})
		return ch
	}
	gotA, gotB := got(a), got(b)
	for u, id := range map[*UDP]wire.NodeID{a: 1, b: 2} {
		if err := u.FilterFor(id); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(ch chan Packet, who string, want []byte) {
		t.Helper()
		select {
		case p := <-ch:
			if string(p.Data) != string(want) {
				t.Fatalf("%s received %x, want %x", who, p.Data, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not receive %x", who, want)
		}
	}
	const addressed = 50
	for i := range addressed {
		d := addressedRequest(t, uint64(i+1), wire.RecipientsOf(2, 9))
		if err := c.Send([]Datagram{{Data: d}}); err != nil {
			t.Fatal(err)
		}
		expect(gotB, "b, named", d)
	}
	all := addressedRequest(t, 1000, wire.Recipients{})
	if err := c.Send([]Datagram{{Data: all}}); err != nil {
		t.Fatal(err)
	}
	expect(gotA, "a, by a datagram for all", all)
	expect(gotB, "b, by a datagram for all", all)
	if st := a.Stats(); st.Received != 1 || st.Filtered != addressed || st.Overflow != 0 {
		t.Fatalf("a received %d, filtered %d, overflow %d: want 1, %d, 0", st.Received, st.Filtered, st.Overflow, addressed)
	}
	if err := a.FilterFor(0); err != nil {
		t.Fatal(err)
	}
	d := addressedRequest(t, 2000, wire.RecipientsOf(2))
	if err := c.Send([]Datagram{{Data: d}}); err != nil {
		t.Fatal(err)
	}
	expect(gotA, "a, filtering nothing", d)
}

// Datagrams lost to a full socket buffer are counted as overflow and those
// the address filter dropped as filtered, exactly, whatever the kernel
// charges the buffer for a datagram: here lo's MTU is 68 bytes, so each
// datagram comes in fragments, which the kernel charges several times its
// size (a review found an estimate of that size counting real losses as
// the filter's). A stalled member is flooded with such datagrams, and with
// datagrams addressed to other members in between, which the filter drops
// whatever room there is.
func TestUDPOverflowAndFilteredCountedApart(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	setLoopbackMTU(t, 68)
	a, b := listenLocalUDP(t, 256<<10), listenLocalUDP(t, 0)
	if err := a.FilterFor(5); err != nil {
		t.Fatal(err)
	}
	elsewhere := addressedRequest(t, 1, wire.RecipientsOf(2, 9))
	release, received := stallReader(t, a)
	payload := make([]byte, 1000) // no mcnode header: the filter keeps it, if there is room
	sent, addressed := 0, 0
	for i := range 400 {
		if err := b.Send([]Datagram{{Data: payload}}); err != nil {
			t.Fatal(err)
		}
		sent++
		if i%8 == 0 {
			if err := b.Send([]Datagram{{Data: elsewhere}}); err != nil {
				t.Fatal(err)
			}
			addressed++
		}
	}
	time.Sleep(100 * time.Millisecond)
	release()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := b.Send([]Datagram{{Data: payload}}); err != nil {
			t.Fatal(err)
		}
		sent++
		time.Sleep(50 * time.Millisecond)
		lost := sent - received()
		st := a.Stats()
		if lost > 0 && st.Overflow == uint64(lost) && st.Filtered == uint64(addressed) {
			t.Logf("%d lost to the full buffer, counted as overflow; %d addressed elsewhere, counted as filtered", lost, addressed)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sent, %d lost to the full buffer, %d addressed elsewhere: overflow %d, filtered %d", sent, lost, addressed, st.Overflow, st.Filtered)
		}
	}
}

// addressedRequest is a datagram of group 1 from member 3: request req,
// addressed to the members to names (none: every member).
func addressedRequest(t testing.TB, req uint64, to wire.Recipients) []byte {
	t.Helper()
	codec, err := wire.NewCodec(wire.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	d, err := codec.Pack(wire.Header{Group: 1, From: 3, For: to}, []wire.Message{&wire.Request{Req: req, Resource: "r"}})
	if err != nil {
		t.Fatal(err)
	}
	return d[0]
}

// stallReader makes u's handler block on its first batch until release is
// called (at the latest when the test ends), so that what is sent meanwhile
// fills u's buffer; received counts the datagrams handled.
func stallReader(t *testing.T, u *UDP) (release func(), received func() int) {
	var n atomic.Int64
	stall := make(chan struct{})
	var first, released sync.Once
	u.SetHandler(func(ps []Packet) {
		first.Do(func() { <-stall })
		n.Add(int64(len(ps)))
	})
	release = func() { released.Do(func() { close(stall) }) }
	t.Cleanup(release)
	return release, func() int { return int(n.Load()) }
}

// setLoopbackMTU sets the MTU of lo in this (private) namespace.
func setLoopbackMTU(t *testing.T, mtu uint32) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		t.Fatal(err)
	}
	ifr.SetUint32(mtu)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFMTU, ifr); err != nil {
		t.Fatalf("setting lo's MTU to %d: %v", mtu, err)
	}
}

// listenLocalUDP opens a UDP transport on the local default group and
// interface (a test's private namespace), with loopback on and socket
// buffers of buf bytes (0: the default), closed when the test ends.
func listenLocalUDP(t *testing.T, buf int) *UDP {
	t.Helper()
	cfg := DefaultLocalConfig()
	ifi, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		t.Fatal(err)
	}
	u, err := ListenUDP(UDPConfig{Group: netip.MustParseAddrPort(cfg.Address), Interface: ifi, Loopback: true, SocketBuffer: buf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}
