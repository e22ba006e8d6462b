package group

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mcnode/mcnode/internal/netns"
)

// The kernel counts the node's own multicasts, which the socket filter
// drops, with its drops for want of buffer, and the node subtracts them
// (noteKernelDrops). The real drops must still all be counted: after the
// two 32-bit counts have wrapped (started here past 2^32), and after
// multicasts that failed to go out (which the filter never saw). A flood
// into a stalled node's 4 KiB buffer: every datagram the node did not
// receive is counted as overflow.
func TestUDPMulticastDropsCountedBesideOwnFiltered(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	a, b := listenLocalUDP(t, 4096), listenLocalUDP(t, 0)
	if !a.filtersOwn {
		t.Fatal("no socket filter on the multicast socket")
	}
	a.ownMulticasts.Store(1 << 32) // as after 2^32 multicasts
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
	var mu sync.Mutex
	received := 0
	stall := make(chan struct{})
	var once sync.Once
	a.SetHandler(func(ps []Packet) {
		once.Do(func() { <-stall })
		mu.Lock()
		received += len(ps)
		mu.Unlock()
	})
	payload := make([]byte, 1000)
	sent := 0
	for range 300 {
		if err := b.Send([]Datagram{{Data: payload}}); err != nil {
			t.Fatal(err)
		}
		sent++
	}
	close(stall)
	// Send until the count carried by what a receives covers the flood.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := b.Send([]Datagram{{Data: payload}}); err != nil {
			t.Fatal(err)
		}
		sent++
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		lost := sent - received
		mu.Unlock()
		if got := a.Drops()[DropOverflow]; got == uint64(lost) && lost > 0 {
			t.Logf("%d datagrams sent, %d lost, %d counted", sent, lost, got)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d datagrams lost into a stalled 4 KiB buffer, %d counted as overflow", lost, a.Drops()[DropOverflow])
		}
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
