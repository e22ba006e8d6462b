package group

import (
	"net"
	"net/netip"
	"testing"
	"unsafe"

	"github.com/mcnode/mcnode/wire"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// addressFilterKeeps runs the multicast socket's address filter for member
// id in x/net/bpf's virtual machine on a datagram, behind the 8-byte UDP
// header the kernel's filter sees first, and reports whether it keeps it.
func addressFilterKeeps(t testing.TB, id wire.NodeID, datagram []byte) bool {
	t.Helper()
	raw := multicastFilter(netip.MustParseAddrPort("10.0.0.1:7000"), false, id)
	prog := make([]bpf.Instruction, len(raw))
	for i, r := range raw {
		prog[i] = r.Disassemble()
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := vm.Run(append(make([]byte, 8), datagram...))
	if err != nil {
		t.Fatal(err)
	}
	return kept > 0
}

// The kernel's filter drops exactly what wire.AddressedElsewhere says a
// member has no use for: the in-memory transport and the simulation drop by
// that function, so they test what the kernel does.
func TestAddressFilterMatchesWire(t *testing.T) {
	for _, d := range filterSamples(t) {
		for _, id := range []wire.NodeID{0, 1, 2, 3, 7, 1<<32 + 2} {
			if keeps, elsewhere := addressFilterKeeps(t, id, d), wire.AddressedElsewhere(d, id); keeps == elsewhere {
				t.Errorf("member %d, datagram %x: the filter keeps it %v, wire says addressed elsewhere %v", id, d[:min(len(d), 80)], keeps, elsewhere)
			}
		}
	}
}

// FuzzAddressFilter: on any datagram, the kernel's filter and
// wire.AddressedElsewhere agree.
//
//	go test ./group -run '^$' -fuzz FuzzAddressFilter -fuzztime 30s
func FuzzAddressFilter(f *testing.F) {
	for _, d := range filterSamples(f) {
		f.Add(d, uint64(2))
	}
	f.Fuzz(func(t *testing.T, d []byte, id uint64) {
		if keeps, elsewhere := addressFilterKeeps(t, wire.NodeID(id), d), wire.AddressedElsewhere(d, wire.NodeID(id)); keeps == elsewhere {
			t.Fatalf("member %d: the filter keeps it %v, wire says addressed elsewhere %v", id, keeps, elsewhere)
		}
	})
}

// filterSamples are datagrams addressed to members 2 and 7, to all, sealed,
// cut short, of another version and of another protocol.
func filterSamples(t testing.TB) [][]byte {
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
	return [][]byte{to27, pack(wire.Recipients{}), pack(wire.RecipientsOf(1<<32 + 2)), sealed, other,
		to27[:wire.HeaderLen], to27[:wire.HeaderLen-1], append([]byte("xx"), to27[2:]...), nil}
}

// ours reads the destination and interface of a multicast datagram from
// its control messages, wherever IP_PKTINFO stands among them.
func TestOursReadsWhereADatagramWent(t *testing.T) {
	u := &UDP{group: &net.UDPAddr{IP: net.IPv4(239, 192, 77, 1)}, cfg: UDPConfig{Interface: &net.Interface{Index: 3}}}
	pktinfo := func(ifindex int32, dst [4]byte) []byte {
		b := make([]byte, unix.CmsgSpace(unix.SizeofInet4Pktinfo))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		h.Level, h.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
		h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
		pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&b[unix.CmsgLen(0)]))
		pi.Ifindex, pi.Addr = ifindex, dst
		return b
	}
	overflow := func() []byte {
		b := make([]byte, unix.CmsgSpace(4))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		h.Level, h.Type = unix.SOL_SOCKET, unix.SO_RXQ_OVFL
		h.SetLen(unix.CmsgLen(4))
		return b
	}
	group, other := [4]byte{239, 192, 77, 1}, [4]byte{239, 192, 77, 2}
	for name, c := range map[string]struct {
		oob  []byte
		want bool
	}{
		"ours":                    {pktinfo(3, group), true},
		"no interface given":      {pktinfo(0, group), true},
		"another interface":       {pktinfo(4, group), false},
		"another group":           {pktinfo(3, other), false},
		"after a drop count":      {append(overflow(), pktinfo(3, group)...), true},
		"another group, later":    {append(overflow(), pktinfo(3, other)...), false},
		"no destination given":    {overflow(), false},
		"no control message":      {nil, true},
		"a control message short": {pktinfo(3, group)[:8], false},
	} {
		if got := u.ours(c.oob); got != c.want {
			t.Errorf("%s: ours = %v, want %v", name, got, c.want)
		}
	}
}
