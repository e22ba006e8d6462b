package sockfilter

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/mcnode/mcnode/wire"
	"golang.org/x/sys/unix"
)

// datagrams are what a member may receive: addressed to members 2 and 7,
// to all, to a member named by its low 32 bits, sealed, cut short, of
// another version and of another protocol.
func datagrams(t testing.TB) map[string][]byte {
	c, err := wire.NewCodec(wire.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	pack := func(r wire.Recipients) []byte {
		d, err := c.Pack(wire.Header{Group: 1, From: 4, T: 9, For: r}, []wire.Message{&wire.Release{Req: 3, Resource: "r", Token: 8}})
		if err != nil {
			t.Fatal(err)
		}
		return d[0]
	}
	to27 := pack(wire.RecipientsOf(2, 7))
	sealed := append([]byte(nil), to27...)
	wire.SetSealed(sealed, true)
	other := append([]byte(nil), to27...)
	other[2]++
	return map[string][]byte{"to 2 and 7": to27, "to all": pack(wire.Recipients{}), "to 2^32+2": pack(wire.RecipientsOf(1<<32 + 2)),
		"sealed": sealed, "another version": other, "header only": to27[:wire.HeaderLen], "short": to27[:wire.HeaderLen-1],
		"not mcnode's": append([]byte("xx"), to27[2:]...), "empty": {}, "first name zero": append(append(append([]byte(nil), to27[:wire.ForOffset]...), 0, 0, 0, 0), to27[wire.ForOffset+4:]...)}
}

// The filter, on a real socket, keeps and drops what
// wire.AddressedElsewhere says, and counts exactly what it drops; with
// dropOwn it drops the node's own datagrams too, counted apart. A new
// program for another member goes on with the same counters.
func TestFilterOnASocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading an eBPF program needs root (CAP_BPF); run as root, as make test does")
	}
	for _, id := range []wire.NodeID{2, 3, 7} {
		rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		own := tx.LocalAddr().(*net.UDPAddr).AddrPort()
		f, err := New(own, true)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := rx.SyscallConn()
		var aerr error
		// First for another member, then for this one: the counters of the
		// first stay, and count on.
		_ = raw.Control(func(fd uintptr) { aerr = errors.Join(f.Attach(int(fd), id+100), f.Attach(int(fd), id)) })
		if aerr != nil {
			t.Fatal(aerr)
		}
		// From another socket (not own): kept or dropped by address.
		other, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(0)
		for name, d := range datagrams(t) {
			if _, err := other.Write(d); err != nil {
				t.Fatal(err)
			}
			elsewhere := wire.AddressedElsewhere(d, id)
			if elsewhere {
				want++
			} else if got := read(t, rx); string(got) != string(d) {
				t.Fatalf("node %d, %s: received %x, want %x", id, name, got, d)
			}
			if n, _, err := f.Counts(); err != nil || n != want {
				t.Fatalf("node %d, %s (addressed elsewhere %v): %d counted (%v), want %d", id, name, elsewhere, n, err, want)
			}
		}
		// Its own: dropped, counted apart, whatever it is; then one of
		// another's still comes through.
		for _, d := range datagrams(t) {
			if _, err := tx.Write(d); err != nil {
				t.Fatal(err)
			}
		}
		all := datagrams(t)["to all"]
		if _, err := other.Write(all); err != nil {
			t.Fatal(err)
		}
		if got := read(t, rx); string(got) != string(all) {
			t.Fatalf("node %d: received %x after its own datagrams, want another's %x", id, got, all)
		}
		if n, own, _ := f.Counts(); n != want || own != uint64(len(datagrams(t))) {
			t.Fatalf("node %d: %d counted as addressed elsewhere and %d as its own after its own datagrams, want %d and %d", id, n, own, want, len(datagrams(t)))
		}
		f.Close()
		rx.Close()
		tx.Close()
		other.Close()
	}
}

func read(t *testing.T, c *net.UDPConn) []byte {
	t.Helper()
	b := make([]byte, 2000)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// Without the privilege to load it, New says so with ErrUnavailable (the
// caller then goes without the eBPF filter). As root, the test runs itself
// again as nobody.
func TestAddressedUnavailableSaysSo(t *testing.T) {
	if os.Geteuid() == 0 {
		dir, err := os.MkdirTemp("", "sockfilter")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		self, err := os.ReadFile(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "test")
		if err := os.WriteFile(bin, self, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-test.run=^TestAddressedUnavailableSaysSo$", "-test.v")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestAddressedUnavailableSaysSo") {
			t.Fatalf("as nobody: %v\n%s", err, out)
		}
		return
	}
	_, err := New(netip.MustParseAddrPort("127.0.0.1:7"), true)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	t.Logf("as uid %d: %v", os.Geteuid(), err)
}

// run runs a loaded filter on a datagram in the kernel (BPF_PROG_TEST_RUN),
// as a frame of loopback: an Ethernet header, an IPv4 header from src, a
// UDP header, then the datagram. The filter sees it from the IP header on,
// so it was loaded for datagrams at offset 28. It reports whether the
// filter kept the datagram.
func run(t testing.TB, prog int, src netip.AddrPort, datagram []byte) bool {
	t.Helper()
	frame := heapBytes(14 + 28 + len(datagram))
	binary.BigEndian.PutUint16(frame[12:], 0x0800) // IPv4
	ip := frame[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 17 // version 4, 20 bytes; TTL; UDP
	binary.BigEndian.PutUint16(ip[2:], uint16(28+len(datagram)))
	copy(ip[12:16], src.Addr().AsSlice())
	copy(ip[16:20], []byte{239, 192, 77, 1})
	binary.BigEndian.PutUint16(ip[20:], src.Port())
	binary.BigEndian.PutUint16(ip[22:], 7946)
	binary.BigEndian.PutUint16(ip[24:], uint16(8+len(datagram)))
	copy(ip[28:], datagram)
	attr := testRunAttr{progFD: uint32(prog), dataSizeIn: uint32(len(frame)), dataIn: addr(frame), repeat: 1}
	if _, err := bpfCall(unix.BPF_PROG_TEST_RUN, unsafe.Pointer(&attr), unsafe.Sizeof(attr)); err != nil {
		t.Fatalf("running the filter: %v", err)
	}
	return attr.retval != 0
}

type testRunAttr struct {
	progFD, retval, dataSizeIn, dataSizeOut uint32
	dataIn, dataOut                         uint64
	repeat, duration                        uint32
}

// loadForRun loads the filter for member id as run needs it.
func loadForRun(t testing.TB, own netip.AddrPort, dropOwn bool, id wire.NodeID) (*Filter, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading an eBPF program needs root (CAP_BPF); run as root, as make test does")
	}
	f, err := New(own, dropOwn)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := f.load(id, 28)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(prog); f.Close() })
	return f, prog
}

// The program the kernel runs keeps and drops exactly what
// wire.AddressedElsewhere says, on 20,000 headers built to probe it: magic
// and version right or off, the sealed flag, lengths around the header's
// end, names equal to the member's low 32 bits, zero or others, members
// with IDs past 2^32. It counts what it drops, and the node's own datagrams
// apart.
func TestAddressedMatchesWire(t *testing.T) {
	// An address above 128.0.0.0 and a port above 32767 (the program
	// compares 32-bit values with signed immediates), and a neighbour on
	// the next port of the same host.
	own, other := netip.MustParseAddrPort("192.168.200.250:65000"), netip.MustParseAddrPort("192.168.200.250:64999")
	rng := uint64(1)
	next := func() uint64 { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng }
	for _, id := range []wire.NodeID{1, 2, 7, 1 << 31, 1<<32 - 1, 1<<32 + 2, 3<<32 + 7} {
		f, prog := loadForRun(t, own, true, id)
		dropped, owned := uint64(0), uint64(0)
		for range 3000 {
			name := func() uint32 {
				switch next() % 4 {
				case 0:
					return 0
				case 1:
					return uint32(id)
				case 2:
					return uint32(next()%9 + 1)
				}
				return uint32(next())
			}
			d := wire.AppendHeader(nil, wire.Header{Group: 1, From: 3, For: wire.Recipients{name(), name(), name()}})
			d = append(d, make([]byte, next()%4)...)
			switch next() % 8 {
			case 0:
				d[2]++ // another version
			case 1:
				d[0] = 'x'
			case 2:
				wire.SetSealed(d, true)
			case 3:
				d = d[:wire.HeaderLen-1-int(next()%5)]
			}
			elsewhere := wire.AddressedElsewhere(d, id)
			if elsewhere {
				dropped++
			}
			if keeps := run(t, prog, other, d); keeps == elsewhere {
				t.Fatalf("member %d, datagram %x: the filter keeps it %v, wire says addressed elsewhere %v", id, d, keeps, elsewhere)
			}
			if run(t, prog, own, d) {
				t.Fatalf("member %d kept its own datagram %x", id, d)
			}
			owned++
		}
		if n, o, err := f.Counts(); err != nil || n != dropped || o != owned {
			t.Fatalf("member %d: %d and %d counted (%v), want %d addressed elsewhere and %d own", id, n, o, err, dropped, owned)
		}
	}
}

// FuzzAddressed: on any datagram, for any member, the program the kernel
// runs and wire.AddressedElsewhere agree.
//
//	go test ./group/sockfilter -run '^$' -fuzz FuzzAddressed -fuzztime 30s
func FuzzAddressed(f *testing.F) {
	for _, d := range datagrams(f) {
		f.Add(d, uint64(2))
	}
	progs := map[wire.NodeID]int{}
	own := netip.MustParseAddrPort("10.0.0.1:7000")
	var counters *Filter
	f.Fuzz(func(t *testing.T, d []byte, id uint64) {
		if uint32(id) == 0 || len(d) > 1400 {
			return
		}
		if os.Geteuid() != 0 {
			t.Skip("needs root")
		}
		if counters == nil {
			var err error
			if counters, err = New(own, false); err != nil {
				t.Fatal(err)
			}
		}
		prog, ok := progs[wire.NodeID(id)]
		if !ok {
			if len(progs) > 64 {
				for k, v := range progs {
					unix.Close(v)
					delete(progs, k)
				}
			}
			var err error
			if prog, err = counters.load(wire.NodeID(id), 28); err != nil {
				t.Fatal(err)
			}
			progs[wire.NodeID(id)] = prog
		}
		if keeps, elsewhere := run(t, prog, netip.MustParseAddrPort("10.0.0.2:7000"), d), wire.AddressedElsewhere(d, wire.NodeID(id)); keeps == elsewhere {
			t.Fatalf("member %d, datagram %x: the filter keeps it %v, wire says addressed elsewhere %v", id, d, keeps, elsewhere)
		}
	})
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// A filter leaks no descriptor when it cannot attach, and once closed it
// answers nothing: the kernel gives its map's descriptor number to the next
// map at once, and a closed filter that read it would report another
// socket's counts.
func TestFilterDescriptors(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_BPF) to load eBPF programs")
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	own := netip.MustParseAddrPort("127.0.0.1:1234")
	before := openFDs(t)
	for range 20 {
		f, err := New(own, true)
		if err != nil {
			t.Fatal(err)
		}
		if f.Attach(p[0], 5) == nil || f.Attach(-1, 5) == nil {
			t.Fatal("attached to a pipe or to -1")
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if after := openFDs(t); after != before {
		t.Fatalf("%d descriptors before, %d after 20 failed attaches and closes", before, after)
	}

	a, err := New(own, true)
	if err != nil {
		t.Fatal(err)
	}
	fd := a.counts
	a.Close()
	b, err := New(own, true)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	buf := heapBytes(12) // the key, slot 0, then the value
	binary.NativeEndian.PutUint64(buf[4:], 42)
	attr := mapElemAttr{mapFD: uint32(b.counts), key: addr(buf[:4]), value: addr(buf[4:])}
	if _, err := bpfCall(unix.BPF_MAP_UPDATE_ELEM, unsafe.Pointer(&attr), unsafe.Sizeof(attr)); err != nil {
		t.Fatal(err)
	}
	if e, _, err := a.Counts(); err == nil {
		t.Errorf("Counts after Close answered %d (the map at descriptor %d is b's now: %v)", e, fd, b.counts == fd)
	}
	if a.Attach(p[0], 5) == nil || a.Close() == nil {
		t.Error("a closed filter attached or closed again")
	}
	if e, _, err := b.Counts(); err != nil || e != 42 {
		t.Errorf("b counts %d, %v", e, err)
	}
}
