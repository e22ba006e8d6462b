package group

import (
	"net"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

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
