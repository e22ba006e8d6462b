package group

// The multicast socket's filters under attack and under churn, from a
// review of the address filter: each of these failed before the filter
// kept one counter map for the socket's life and counted the node's own
// datagrams itself. Every test runs in a private network namespace
// (netns.Isolate); nothing is sent on the machine's real interfaces.

import (
	"bufio"
	"encoding/binary"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcnode/mcnode/internal/netns"
	"github.com/mcnode/mcnode/wire"
	"golang.org/x/sys/unix"
)

func filterTestOpenFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// UDP.Close releases the filter with the sockets: no file descriptor, map
// or program is left behind (two leaked per transport before).
func TestUDPCloseReleasesTheFilter(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	warm := listenLocalUDP(t, 0) // let the runtime open its own descriptors first
	_ = warm
	before := filterTestOpenFDs(t)
	const rounds = 20
	for range rounds {
		u := listenLocalUDP(t, 0)
		if err := u.FilterFor(5); err != nil {
			t.Fatal(err)
		}
		if err := u.Close(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if after := filterTestOpenFDs(t); after != before {
		t.Fatalf("%d transports opened, filtered and closed: %d descriptors before, %d after (%d leaked per transport)",
			rounds, before, after, (after-before)/rounds)
	}
}

// The datagrams the address filter dropped are counted once in its map and
// once in the kernel's SO_RXQ_OVFL count; overflow is the difference. While
// FilterFor replaces the program, Filtered must not fall and no overflow may
// appear (a race between reading a replaced filter's count and the new one's
// latched a false overflow for good before). No datagram is lost here.
func TestUDPFilterReplacedWhileCounted(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	a, c := listenLocalUDP(t, 0), listenLocalUDP(t, 0)
	got := make(chan struct{}, 1024)
	a.SetHandler(func(ps []Packet) {
		for range ps {
			got <- struct{}{}
		}
	})
	if err := a.FilterFor(5); err != nil {
		t.Fatal(err)
	}
	const addressed = 200
	elsewhere := addressedRequest(t, 1, wire.RecipientsOf(9))
	for range addressed {
		if err := c.Send([]Datagram{{Data: elsewhere}}); err != nil {
			t.Fatal(err)
		}
	}
	// One for all: it carries the kernel's count (200) to a.
	if err := c.Send([]Datagram{{Data: addressedRequest(t, 1, wire.Recipients{})}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("a received nothing")
	}
	if st := a.Stats(); st.Filtered != addressed || st.Overflow != 0 {
		t.Fatalf("before the race: filtered %d, overflow %d; want %d, 0", st.Filtered, st.Overflow, addressed)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var fell atomic.Uint64
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := uint64(0)
		for !stop.Load() {
			st := a.Stats()
			if st.Filtered < last {
				fell.Add(1)
			}
			last = max(last, st.Filtered)
		}
	}()
	for i := range 20000 {
		if err := a.FilterFor(wire.NodeID(5 + i%2)); err != nil {
			t.Fatal(err)
		}
		if a.Stats().Overflow != 0 {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	st := a.Stats()
	t.Logf("after the filter was replaced: filtered %d, overflow %d, Filtered fell %d times", st.Filtered, st.Overflow, fell.Load())
	if st.Overflow != 0 || fell.Load() != 0 {
		t.Fatalf("nothing was lost, yet overflow reads %d (latched for good), and Filtered fell %d times", st.Overflow, fell.Load())
	}
}

// A datagram from the node's own address and port that the node did not
// send (spoofed by any host that can reach the group: the address is in
// every datagram the node multicasts) is dropped by the own check, which
// counts it: it is no overflow (it was, before the filter counted its own
// drops). (Bad UDP checksums were checked too: on this kernel, 6.18, a
// multicast datagram's checksum is verified once, before the sockets'
// filters, and moves no socket's count.)
func TestUDPSpoofedOwnDatagramsNoOverflow(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	a, c := listenLocalUDP(t, 0), listenLocalUDP(t, 0)
	got := make(chan struct{}, 1024)
	a.SetHandler(func(ps []Packet) {
		for range ps {
			got <- struct{}{}
		}
	})
	if err := a.FilterFor(5); err != nil {
		t.Fatal(err)
	}
	group := netip.MustParseAddrPort(DefaultLocalConfig().Address)
	hello := func() {
		t.Helper()
		// A datagram a reads carries the kernel's count.
		time.Sleep(50 * time.Millisecond)
		if err := c.Send([]Datagram{{Data: []byte("hello")}}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("a received nothing")
		}
	}
	const bad, spoofed = 10, 10
	for range bad {
		filterTestSendRawIP(t, group, netip.MustParseAddrPort("127.0.0.1:4242"), nil, 0x1234, []byte("bad checksum"), 0)
	}
	hello()
	afterBad := a.Stats().Overflow
	for range spoofed {
		filterTestSendRawIP(t, group, a.ownAddr(), nil, 0, []byte("from a's own address, not sent by a"), 0)
	}
	hello()
	st := a.Stats()
	snmp, _ := os.ReadFile("/proc/net/snmp")
	t.Logf("a: %+v\n/proc/net/snmp:\n%s", st, snmp)
	if afterBad != 0 || st.Overflow != 0 {
		t.Fatalf("no datagram was lost to a full buffer; overflow after %d bad checksums: %d; after %d more spoofed from a's address: %d", bad, afterBad, spoofed, st.Overflow)
	}
}

// A looped-back copy of the node's own multicast lost on the way (here:
// fragments never reassembled; on a busy host: the backlog of netif_rx
// full) hides no real loss to a full buffer: the filter counts the own
// copies it drops, where the node used to subtract every multicast it sent.
func TestUDPLostOwnCopiesHideNoOverflow(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	setLoopbackMTU(t, 68)
	for _, f := range []string{"ipfrag_low_thresh", "ipfrag_high_thresh"} {
		if err := os.WriteFile("/proc/sys/net/ipv4/"+f, []byte("0"), 0); err != nil {
			t.Skipf("cannot set %s in this namespace: %v", f, err)
		}
	}
	a, b := listenLocalUDP(t, 4096), listenLocalUDP(t, 0)
	if err := a.FilterFor(5); err != nil {
		t.Fatal(err)
	}
	const own = 50
	for range own {
		// Fragmented on lo at MTU 68, never reassembled: no copy reaches
		// a's filter, and the kernel counts none.
		if err := a.Send([]Datagram{{Data: make([]byte, 600)}}); err != nil {
			t.Fatal(err)
		}
	}
	release, received := stallReader(t, a)
	small := make([]byte, 32) // whole at MTU 68
	sent := 0
	for range 300 {
		if err := b.Send([]Datagram{{Data: small}}); err != nil {
			t.Fatal(err)
		}
		sent++
	}
	time.Sleep(100 * time.Millisecond)
	release()
	deadline := time.Now().Add(5 * time.Second)
	var lost int
	for time.Now().Before(deadline) {
		if err := b.Send([]Datagram{{Data: small}}); err != nil {
			t.Fatal(err)
		}
		sent++
		time.Sleep(50 * time.Millisecond)
		lost = sent - received()
		if a.Stats().Overflow == uint64(lost) && lost > 0 {
			return
		}
	}
	t.Fatalf("%d datagrams lost to a's full buffer, overflow counts %d (%d of a's own multicasts never came back)", lost, a.Stats().Overflow, own)
}

// filterTestSendRawIP multicasts to the local group, through a raw socket,
// an IPv4 packet built here, as any host of the LAN can: options (a
// multiple of 4 bytes) after the fixed header, the UDP header with the
// source and checksum given, and extra bytes after the UDP datagram (the IP
// length covers them, the UDP length does not).
func filterTestSendRawIP(t *testing.T, group, src netip.AddrPort, options []byte, csum uint16, payload []byte, trailer int) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Ifindex: 1}); err != nil {
		t.Fatal(err)
	}
	ihl := 20 + len(options)
	pkt := make([]byte, ihl+8+len(payload)+trailer)
	pkt[0], pkt[8], pkt[9] = byte(0x40|ihl/4), 1, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	s4, g4 := src.Addr().As4(), group.Addr().As4()
	copy(pkt[12:], s4[:])
	copy(pkt[16:], g4[:])
	copy(pkt[20:], options)
	u := pkt[ihl:]
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], group.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(8+len(payload)))
	binary.BigEndian.PutUint16(u[6:], csum)
	copy(u[8:], payload)
	if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: g4}); err != nil {
		t.Fatal(err)
	}
}

// Hostile shapes on a real socket: IP options (the filter must read the
// datagram behind them), bytes after the UDP datagram (the kernel trims to
// the UDP length before the filter: a header cut short stays short), and a
// header whose first name is the member's and whose others are garbage.
func TestUDPFilterHostileShapes(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	a := listenLocalUDP(t, 0)
	got := make(chan []byte, 64)
	a.SetHandler(func(ps []Packet) {
		for _, p := range ps {
			got <- p.Data
		}
	})
	if err := a.FilterFor(5); err != nil {
		t.Fatal(err)
	}
	group := netip.MustParseAddrPort(DefaultLocalConfig().Address)
	other := netip.MustParseAddrPort("127.0.0.1:4242")
	nops := []byte{1, 1, 1, 0} // NOP NOP NOP END
	lsrr := make([]byte, 40)   // the longest options: 40 bytes
	for i := range lsrr {
		lsrr[i] = 1
	}
	cases := []struct {
		name     string
		options  []byte
		payload  []byte
		trailer  int
		elsewhen bool
	}{
		{"for 9, options", nops, addressedRequest(t, 1, wire.RecipientsOf(9)), 0, true},
		{"for 9, 40 bytes of options", lsrr, addressedRequest(t, 1, wire.RecipientsOf(9)), 0, true},
		{"for all, options", nops, addressedRequest(t, 1, wire.Recipients{}), 0, false},
		{"for 5, 40 bytes of options", lsrr, addressedRequest(t, 1, wire.RecipientsOf(9, 5)), 0, false},
		{"short header, bytes after it", nil, addressedRequest(t, 1, wire.RecipientsOf(9))[:wire.HeaderLen-1], 20, false},
		{"for 9, bytes after it", nil, addressedRequest(t, 1, wire.RecipientsOf(9)), 20, true},
	}
	want := uint64(0)
	for _, c := range cases {
		if wire.AddressedElsewhere(c.payload, 5) != c.elsewhen {
			t.Fatalf("%s: the case is wrong", c.name)
		}
		filterTestSendRawIP(t, group, other, c.options, 0, c.payload, c.trailer)
		if c.elsewhen {
			want++
			time.Sleep(20 * time.Millisecond)
		} else {
			select {
			case d := <-got:
				if string(d) != string(c.payload) {
					t.Fatalf("%s: received %x, want %x", c.name, d, c.payload)
				}
			case <-time.After(2 * time.Second):
				t.Fatalf("%s: the member did not receive it", c.name)
			}
		}
		if f := a.Filtered(); f != want {
			t.Fatalf("%s: filtered %d, want %d", c.name, f, want)
		}
	}
	select {
	case d := <-got:
		t.Fatalf("received %x, addressed elsewhere", d)
	default:
	}
}

// A datagram another CPU is filtering while FilterFor replaces the program
// still runs the old one (the kernel frees it after an RCU grace period):
// its drop is counted all the same, in the one map every program of the
// socket shares (a count read from a replaced filter's own map missed 8 of
// 1,353,568 before, latched as overflow). No datagram is lost here: every
// one sent is addressed elsewhere, dropped by either program.
func TestUDPFilterReplacedUnderLoad(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	a, c := listenLocalUDP(t, 0), listenLocalUDP(t, 0)
	got := make(chan struct{}, 16)
	a.SetHandler(func(ps []Packet) {
		for range ps {
			select {
			case got <- struct{}{}:
			default:
			}
		}
	})
	if err := a.FilterFor(5); err != nil {
		t.Fatal(err)
	}
	elsewhere := addressedRequest(t, 1, wire.RecipientsOf(9))
	var stop atomic.Bool
	var sent atomic.Uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		batch := make([]Datagram, 16)
		for i := range batch {
			batch[i] = Datagram{Data: elsewhere}
		}
		for !stop.Load() {
			if err := c.Send(batch); err == nil {
				sent.Add(uint64(len(batch)))
			}
		}
	}()
	for i := range 20000 {
		if err := a.FilterFor(wire.NodeID(5 + i%2)); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	<-done
	time.Sleep(100 * time.Millisecond)
	if err := c.Send([]Datagram{{Data: addressedRequest(t, 1, wire.Recipients{})}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("a received nothing")
	}
	st := a.Stats()
	t.Logf("%d addressed elsewhere sent, filtered %d, overflow %d, c's send errors %d", sent.Load(), st.Filtered, st.Overflow, c.Stats().SendErrors)
	if st.Filtered != sent.Load() || st.Overflow != 0 {
		t.Fatalf("%d sent, all addressed elsewhere: filtered %d, overflow %d", sent.Load(), st.Filtered, st.Overflow)
	}
}

// rcvbufErrors reads Udp RcvbufErrors of this namespace.
func rcvbufErrors(t *testing.T) uint64 {
	t.Helper()
	f, err := os.Open("/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = fields
			continue
		}
		for i, n := range names {
			if n == "RcvbufErrors" {
				v, _ := strconv.ParseUint(fields[i], 10, 64)
				return v
			}
		}
	}
	t.Fatal("no Udp RcvbufErrors")
	return 0
}

// Overflow while the filters drop fast and Stats is read in a loop: nothing
// is lost (a large buffer, RcvbufErrors stays put), so every Stats call must
// say 0. When overflows read the filter's counts before the kernel's, a drop
// counted between the two reads and reported at once by the next datagram
// showed as a loss, latched for good (overflow 19 to 464 within 0.3 s).
func TestUDPOverflowStatsRace(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	t.Run("ebpf", testOverflowStatsRace)
	t.Run("classic", func(t *testing.T) {
		useEBPF = false
		defer func() { useEBPF = true }()
		testOverflowStatsRace(t)
	})
}

func testOverflowStatsRace(t *testing.T) {
	a, c := listenLocalUDP(t, 8<<20), listenLocalUDP(t, 8<<20)
	var got atomic.Uint64
	a.SetHandler(func(ps []Packet) { got.Add(uint64(len(ps))) })
	c.SetHandler(func(ps []Packet) {})
	if useEBPF {
		if err := a.FilterFor(5); err != nil {
			t.Fatal(err)
		}
	}
	elsewhere, all := addressedRequest(t, 1, wire.RecipientsOf(9)), addressedRequest(t, 1, wire.Recipients{})
	before := rcvbufErrors(t)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // a's own multicasts: each one a filter drop
		defer wg.Done()
		batch := []Datagram{{Data: all}, {Data: all}, {Data: all}, {Data: all}}
		for !stop.Load() {
			_ = a.Send(batch)
		}
	}()
	go func() { // c: datagrams for a (carry the kernel's count) and for others
		defer wg.Done()
		batch := []Datagram{{Data: elsewhere}, {Data: all}, {Data: elsewhere}, {Data: all}}
		for !stop.Load() {
			_ = c.Send(batch)
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	polls := 0
	var first uint64
	for time.Now().Before(deadline) {
		polls++
		if o := a.Stats().Overflow; o != 0 {
			first = o
			e, ow := a.counts()
			t.Logf("first overflow %d (reader %d, multicast %d, unicast %d): mcDrops %d, filtered %d, ownFiltered %d, ownMulticasts %d (now: counts %d %d)", o, a.overflow.Load(), a.mcOverflow.Load(), a.ucDrops.Load(), a.mcDrops.Load(), a.filtered.Load(), a.ownFiltered.Load(), a.ownMulticasts.Load(), e, ow)
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	after := rcvbufErrors(t)
	st := a.Stats()
	t.Logf("polls %d, a received %d, stats %+v, own multicasts %d, RcvbufErrors %d -> %d", polls, got.Load(), st, a.ownMulticasts.Load(), before, after)
	if after != before {
		t.Skipf("the kernel really dropped %d datagrams for want of buffer: inconclusive", after-before)
	}
	if first != 0 || st.Overflow != 0 {
		t.Fatalf("no datagram was lost to a full buffer (RcvbufErrors unchanged), yet Stats said overflow %d after %d polls (now %d, latched)", first, polls, st.Overflow)
	}
}

// A closed transport's Stats read no other socket's counters: Close
// releases the filter's map, whose descriptor number the kernel gives to the
// next map at once.
func TestUDPStatsAfterCloseReadNoOtherMap(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	a := listenLocalUDP(t, 0)
	if err := a.FilterFor(5); err != nil {
		t.Fatal(err)
	}
	if a.ebpf == nil {
		t.Skip("no eBPF filter")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	closedFiltered := a.Stats().Filtered
	b, c := listenLocalUDP(t, 0), listenLocalUDP(t, 0)
	got := make(chan struct{}, 16)
	b.SetHandler(func(ps []Packet) {
		select {
		case got <- struct{}{}:
		default:
		}
	})
	if err := b.FilterFor(5); err != nil {
		t.Fatal(err)
	}
	d := addressedRequest(t, 1, wire.RecipientsOf(9))
	for range 100 {
		if err := c.Send([]Datagram{{Data: d}}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	t.Logf("closed a: filtered %d at Close, %d now; b (open): filtered %d", closedFiltered, a.Stats().Filtered, b.Stats().Filtered)
	if n := a.Stats().Filtered; n != closedFiltered {
		t.Fatalf("a closed transport's Filtered moved from %d to %d: it reads another socket's map through a reused descriptor", closedFiltered, n)
	}
}

// What the filter dropped before Close stays counted as filtered after it,
// not as lost: a closed filter answers nothing, and Stats had only the
// counts last read (none, here: every drop showed as an overflow).
func TestUDPStatsAfterCloseKeepFilterCounts(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	a, c := listenLocalUDP(t, 4<<20), listenLocalUDP(t, 4<<20)
	var got atomic.Uint64
	a.SetHandler(func(ps []Packet) { got.Add(uint64(len(ps))) })
	c.SetHandler(func(ps []Packet) {})
	if err := a.FilterFor(5); err != nil {
		t.Fatal(err)
	}
	if a.ebpf == nil {
		t.Skip("no eBPF filter")
	}
	elsewhere, all := addressedRequest(t, 1, wire.RecipientsOf(9)), addressedRequest(t, 1, wire.Recipients{})
	for range 100 {
		if err := c.Send([]Datagram{{Data: elsewhere}}); err != nil {
			t.Fatal(err)
		}
	}
	// one for a, carrying the kernel's count of drops
	if err := c.Send([]Datagram{{Data: all}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for got.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	st := a.Stats()
	t.Logf("after Close: %+v (received %d, mcDrops %d)", st, got.Load(), a.mcDrops.Load())
	if st.Overflow != 0 {
		t.Errorf("nothing was lost, yet Overflow %d after Close (Filtered %d)", st.Overflow, st.Filtered)
	}
}

// FilterFor, Stats and Close at once, for the race detector and for a
// deadlock (the filter's mutex is taken inside the socket's Control).
func TestUDPFilterForStatsCloseConcurrently(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	for range 20 {
		a := listenLocalUDP(t, 0)
		a.SetHandler(func([]Packet) {})
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Add(3)
		go func() {
			defer wg.Done()
			for id := wire.NodeID(1); ; id++ {
				select {
				case <-stop:
					return
				default:
				}
				_ = a.FilterFor(id%7 + 1)
			}
		}()
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = a.Stats()
			}
		}()
		go func() {
			defer wg.Done()
			time.Sleep(20 * time.Millisecond)
			_ = a.Close()
			close(stop)
		}()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("FilterFor, Stats and Close did not finish in 10 s")
		}
	}
}
