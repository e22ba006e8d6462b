package group

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mcnode/mcnode/group/sockfilter"
	"github.com/mcnode/mcnode/wire"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// UDPConfig configures the UDP multicast transport.
type UDPConfig struct {
	// Group is the multicast group address and port, IPv4
	// (239.0.0.0/8 is for organisation-local use).
	Group netip.AddrPort
	// Interface is where the group is joined and multicast is sent. It must
	// be given: the kernel's default may be an interface you did not mean.
	Interface *net.Interface
	// Bind is this node's unicast address; the zero value (or 0.0.0.0)
	// picks the interface's first IPv4 address, since members know each
	// other by the address they send from. Port 0 picks a free port.
	Bind netip.AddrPort
	// TTL is the multicast time-to-live: 0 keeps datagrams on this host,
	// 1 on the local network segment.
	TTL int
	// Loopback delivers this host's multicasts to its other sockets, which
	// several nodes on one host need.
	Loopback bool
	// MaxDatagram is the largest datagram accepted; larger ones are dropped
	// and counted.
	MaxDatagram int
	// ReadBatch is how many datagrams one read system call may return.
	ReadBatch int
	// SocketBuffer is the receive and send buffer asked of the kernel for
	// each socket, in bytes (0: DefaultSocketBuffer; the kernel may give
	// less, up to net.core.rmem_max and wmem_max). A burst of the group,
	// a state transfer to a joining member for one, waits there while the
	// node is busy instead of being dropped.
	SocketBuffer int
}

// DefaultSocketBuffer is UDPConfig.SocketBuffer's default, as memberlist's.
const DefaultSocketBuffer = 2 << 20

// UDPStats counts what the UDP transport did.
type UDPStats struct {
	Sent, Received       uint64
	SentBytes, RecvBytes uint64
	Oversized            uint64 // datagrams over MaxDatagram, dropped
	Stray                uint64 // multicast for another group or interface, dropped
	SendErrors           uint64
	Overflow             uint64 // datagrams dropped because the node fell behind (its queue, or the kernel's socket buffer full)
	// Filtered counts the multicast datagrams addressed to other members
	// that the socket filter dropped before they woke the node (see
	// FilterFor).
	Filtered uint64
}

// UDP is the real transport: one socket bound to the group address, joined
// on the interface, receives the multicast; a second, unicast socket sends
// everything (so that its address is every datagram's source) and receives
// direct messages.
type UDP struct {
	cfg     UDPConfig
	mc, uc  net.PacketConn
	mcp     *ipv4.PacketConn
	ucp     *ipv4.PacketConn
	group   *net.UDPAddr
	local   string
	packets chan Packet
	handler atomic.Pointer[func([]Packet)] // set: packets go to it, not to the channel
	rcvBuf  int                            // the receive buffer granted
	closed  chan struct{}
	once    sync.Once
	readers sync.WaitGroup

	addrMu sync.Mutex
	addrs  map[string]*net.UDPAddr

	sent, received, sentBytes, recvBytes, oversized, stray, sendErrors, overflow atomic.Uint64
	// The kernel counts the datagrams it dropped on each socket (SO_RXQ_OVFL:
	// a running count it attaches to what it delivers next): for want of
	// room in the buffer, and, on the multicast socket, those its filter
	// dropped. ucDrops is the unicast socket's count; mcDrops the multicast
	// socket's (written by its reader only), of which overflows subtracts
	// the filter's (mcOverflow only grows: see overflows).
	ucDrops, mcDrops, mcOverflow atomic.Uint64
	// filtersOwn: the multicast socket's filter drops this node's own
	// multicasts, which the kernel counts with the drops for want of
	// buffer. The eBPF filter (ebpf, if the kernel took it) counts them,
	// and what it drops as addressed to other members (FilterFor), exactly;
	// the classic one counts nothing, and ownMulticasts stands for its
	// count (each multicast sent, counted before it is sent, so that the
	// difference never counts one as a drop).
	filtersOwn    bool
	ownMulticasts atomic.Uint64
	ebpf          *sockfilter.Filter
	ebpfErr       error // why there is none
	// filterMu serialises FilterFor; filtered and ownFiltered hold the last
	// counts read from the eBPF filter (they only grow).
	filterMu              sync.Mutex
	filterFor             wire.NodeID
	filtered, ownFiltered atomic.Uint64
}

// ListenUDP opens the sockets, joins the group and starts reading.
func ListenUDP(cfg UDPConfig) (*UDP, error) {
	if !cfg.Group.Addr().Is4() || !cfg.Group.Addr().IsMulticast() || cfg.Group.Port() == 0 {
		return nil, fmt.Errorf("group: %s is not an IPv4 multicast address with a port (want e.g. 239.192.0.1:7946)", cfg.Group)
	}
	if cfg.Interface == nil {
		return nil, errors.New("group: no interface to join the multicast group on")
	}
	if cfg.TTL < 0 || cfg.TTL > 255 {
		return nil, fmt.Errorf("group: multicast TTL %d not in [0, 255]", cfg.TTL)
	}
	if cfg.MaxDatagram <= 0 {
		cfg.MaxDatagram = 65507
	}
	if cfg.ReadBatch <= 0 {
		cfg.ReadBatch = 16
	}
	if cfg.SocketBuffer <= 0 {
		cfg.SocketBuffer = DefaultSocketBuffer
	}
	if !cfg.Bind.Addr().IsValid() || cfg.Bind.Addr().IsUnspecified() {
		// Members know each other by the address they send from, which
		// the wildcard is not: bind the interface's own.
		ip, err := interfaceIPv4(cfg.Interface)
		if err != nil {
			return nil, err
		}
		cfg.Bind = netip.AddrPortFrom(ip, cfg.Bind.Port())
	}
	u := &UDP{
		cfg:     cfg,
		group:   net.UDPAddrFromAddrPort(cfg.Group),
		packets: make(chan Packet, 4096),
		closed:  make(chan struct{}),
		addrs:   map[string]*net.UDPAddr{},
	}
	var err error
	if u.uc, err = net.ListenPacket("udp4", cfg.Bind.String()); err != nil {
		return nil, fmt.Errorf("group: unicast socket on %s: %w", cfg.Bind, err)
	}
	u.local = u.uc.LocalAddr().String()
	u.ucp = ipv4.NewPacketConn(u.uc)
	for _, set := range []func() error{
		func() error { return u.ucp.SetMulticastInterface(cfg.Interface) },
		func() error { return u.ucp.SetMulticastTTL(cfg.TTL) },
		func() error { return u.ucp.SetMulticastLoopback(cfg.Loopback) },
	} {
		if err := set(); err != nil {
			u.uc.Close()
			return nil, fmt.Errorf("group: configuring multicast on %s: %w", cfg.Interface.Name, err)
		}
	}
	// Several nodes on one host bind the same group address and port.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) })
		return errors.Join(err, serr)
	}}
	if u.mc, err = lc.ListenPacket(context.Background(), "udp4", cfg.Group.String()); err != nil {
		u.uc.Close()
		return nil, fmt.Errorf("group: multicast socket on %s: %w", cfg.Group, err)
	}
	u.rcvBuf = cfg.SocketBuffer
	for _, c := range []net.PacketConn{u.uc, u.mc} {
		u.rcvBuf = min(u.rcvBuf, tuneSocket(c, cfg.SocketBuffer))
	}
	u.mcp = ipv4.NewPacketConn(u.mc)
	if err := u.mcp.JoinGroup(cfg.Interface, &net.UDPAddr{IP: u.group.IP}); err != nil {
		u.uc.Close()
		u.mc.Close()
		return nil, fmt.Errorf("group: joining %s on %s: %w", cfg.Group.Addr(), cfg.Interface.Name, err)
	}
	if err := u.mcp.SetControlMessage(ipv4.FlagDst|ipv4.FlagInterface, true); err != nil {
		u.Close()
		return nil, fmt.Errorf("group: control messages: %w", err)
	}
	// Without the filter, the node drops its own multicast itself, after
	// reading it (Group.receive). Without loopback there is none to drop.
	u.setUpFilter()
	u.readers.Add(2)
	go u.read(u.mc, true)
	go u.read(u.uc, false)
	return u, nil
}

// tuneSocket asks for socket buffers of size bytes: beyond the kernel's cap
// (net.core.rmem_max, wmem_max) where the process may (CAP_NET_ADMIN), else
// up to it. It returns the receive buffer granted (size when it cannot
// tell). A smaller buffer drops more under bursts, which the protocol
// repairs, except a large state transfer (see ReceiveBuffer). It also asks
// the kernel to attach its count of the datagrams it dropped for want of
// buffer to what it delivers next (SO_RXQ_OVFL; where it cannot, those
// drops go uncounted).
func tuneSocket(c net.PacketConn, size int) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return size
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return size
	}
	granted := size
	_ = raw.Control(func(fd uintptr) {
		for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[0], size) != nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[1], size)
			}
		}
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1)
		// Linux reports twice what it grants (it counts its bookkeeping).
		if got, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF); err == nil {
			granted = got / 2
		}
	})
	return granted
}

func (u *UDP) ownAddr() netip.AddrPort { return u.uc.LocalAddr().(*net.UDPAddr).AddrPort() }

// setUpFilter gives the multicast socket its filter: the eBPF one where the
// kernel takes it, which counts what it drops, else the classic one, which
// drops the node's own multicasts (with loopback: without, there are none).
func (u *UDP) setUpFilter() {
	f, err := (*sockfilter.Filter)(nil), fmt.Errorf("%w: not tried", sockfilter.ErrUnavailable)
	if useEBPF {
		f, err = sockfilter.New(u.ownAddr(), u.cfg.Loopback)
	}
	if err == nil && u.cfg.Loopback {
		err = u.attach(f, 0)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		u.ebpfErr = err
		u.filtersOwn = u.cfg.Loopback && u.mcp.SetBPF(sockfilter.Own(u.ownAddr())) == nil
		return
	}
	u.ebpf, u.filtersOwn = f, u.cfg.Loopback
}

// useEBPF is false in tests of the classic filter.
var useEBPF = true

// attach attaches f's program for member id to the multicast socket.
func (u *UDP) attach(f *sockfilter.Filter, id wire.NodeID) error {
	raw, err := u.mc.(syscall.Conn).SyscallConn()
	if err != nil {
		return err
	}
	cerr := raw.Control(func(fd uintptr) { err = f.Attach(int(fd), id) })
	return errors.Join(cerr, err)
}

// FilterFor has the multicast socket's filter drop, from now on, the
// datagrams addressed to members other than id (wire.Recipients), before
// they wake the node: at heavy load on one lock, about two of every three
// datagrams a member would read. It counts what it drops, so that overflow
// stays exact (package sockfilter); 0 drops nothing more. A process the
// kernel will not load an eBPF program for (it lacks CAP_BPF) gets an
// error that wraps sockfilter.ErrUnavailable, and reads everything.
func (u *UDP) FilterFor(id wire.NodeID) error {
	u.filterMu.Lock()
	defer u.filterMu.Unlock()
	if u.ebpf == nil {
		return u.ebpfErr
	}
	if id == u.filterFor {
		return nil
	}
	if err := u.attach(u.ebpf, id); err != nil {
		return err
	}
	u.filterFor = id
	return nil
}

// counts reads the eBPF filter's counters, keeping the last good figures if
// the kernel does not answer: they never go back.
func (u *UDP) counts() (elsewhere, own uint64) {
	if u.ebpf != nil {
		if e, o, err := u.ebpf.Counts(); err == nil {
			latch(&u.filtered, e)
			latch(&u.ownFiltered, o)
		}
	}
	return u.filtered.Load(), u.ownFiltered.Load()
}

// latch raises v to n, if n is higher.
func latch(v *atomic.Uint64, n uint64) {
	for {
		old := v.Load()
		if n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}

// Filtered counts the multicast datagrams addressed to other members that
// the socket filter dropped (UDPStats.Filtered).
func (u *UDP) Filtered() uint64 {
	elsewhere, _ := u.counts()
	return elsewhere
}

// ReceiveBuffer returns the receive buffer the kernel granted each socket
// (the smaller of the two) and the one asked for. Short of what was asked,
// a burst the node is too busy to read at once is dropped: above all the
// state a newcomer receives, one datagram after another, when the group
// holds thousands of locks (raise net.core.rmem_max, or give the process
// CAP_NET_ADMIN).
func (u *UDP) ReceiveBuffer() (granted, asked int) { return u.rcvBuf, u.cfg.SocketBuffer }

// interfaceIPv4 returns the first IPv4 address of an interface.
func interfaceIPv4(ifi *net.Interface) (netip.Addr, error) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("group: addresses of %s: %w", ifi.Name, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP.To4()); ok && n.IP.To4() != nil {
				return ip, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("group: interface %s has no IPv4 address", ifi.Name)
}

// LocalAddr returns the unicast address.
func (u *UDP) LocalAddr() string { return u.local }

// Packets returns the received datagrams.
func (u *UDP) Packets() <-chan Packet { return u.packets }

// Stats returns the transport's counters.
func (u *UDP) Stats() UDPStats {
	return UDPStats{
		Sent: u.sent.Load(), Received: u.received.Load(), SentBytes: u.sentBytes.Load(), RecvBytes: u.recvBytes.Load(),
		Oversized: u.oversized.Load(), Stray: u.stray.Load(), SendErrors: u.sendErrors.Load(), Overflow: u.overflows(),
		Filtered: u.Filtered(),
	}
}

// Drops returns what the transport dropped, by reason (see DropCounter).
func (u *UDP) Drops() map[string]uint64 {
	return map[string]uint64{DropOversized: u.oversized.Load(), DropStray: u.stray.Load(), DropOverflow: u.overflows()}
}

// overflows counts what the node dropped for falling behind: in its own
// queue, and in the kernel's socket buffers.
func (u *UDP) overflows() uint64 {
	// The multicast socket's: the kernel's count less what the filter
	// dropped. The eBPF filter counts a drop before the kernel does, and the
	// kernel's count reaches the node only with the next datagram, so the
	// difference may fall short for a moment, never run over: it is kept as
	// the highest seen. The kernel's count is read first, so that a drop the
	// filter counts after it cannot make the difference run over (read the
	// other way round, one counted between the two reads and reported by a
	// datagram at once was latched as an overflow that never was). The
	// classic filter counts nothing: each multicast sent stands for the
	// copy of it it dropped, which overstates what it dropped when a copy
	// never came back (then real drops may go unseen).
	drops := u.mcDrops.Load()
	elsewhere, own := u.counts()
	if u.ebpf == nil && u.filtersOwn {
		own = u.ownMulticasts.Load()
	}
	if drops > elsewhere+own {
		latch(&u.mcOverflow, drops-elsewhere-own)
	}
	return u.overflow.Load() + u.mcOverflow.Load() + u.ucDrops.Load()
}

// noteKernelDrops reads the kernel's count of drops from a datagram's
// control messages, if it carries one (without allocating: with the
// own-multicast filter, every multicast datagram does).
func (u *UDP) noteKernelDrops(oob []byte, multicast bool) {
	for len(oob) > 0 {
		h, data, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			return
		}
		oob = rest
		if h.Level != unix.SOL_SOCKET || h.Type != unix.SO_RXQ_OVFL || len(data) < 4 {
			continue
		}
		// A running count since the socket opened, of 32 bits.
		raw := binary.NativeEndian.Uint32(data)
		if !multicast {
			latch(&u.ucDrops, uint64(raw))
			continue
		}
		// A running count of 32 bits, kept in 64: it grows by what it
		// grew since it was last read (short of 2^31 at once).
		if d := int32(raw - uint32(u.mcDrops.Load())); d > 0 {
			u.mcDrops.Add(uint64(d))
		}
	}
}

func (u *UDP) read(c net.PacketConn, multicast bool) {
	defer u.readers.Done()
	// Room for the kernel's count of drops (SO_RXQ_OVFL), and on the
	// multicast socket for where each datagram went. The count comes only
	// once the kernel dropped something (on the multicast socket, from the
	// node's first own multicast on: see ownMulticastFilter): control
	// messages longer than where-it-went alone are parsed for it.
	where := 0
	if multicast {
		where = len(ipv4.NewControlMessage(ipv4.FlagDst | ipv4.FlagInterface))
	}
	b := newReadBatch(u.cfg.ReadBatch, u.cfg.MaxDatagram+1, where+unix.CmsgSpace(4))
	pkts := make([]Packet, 0, u.cfg.ReadBatch)
	sources := sourceNames{}
	deliver := func(n int) {
		now := time.Now()
		pkts = pkts[:0]
		for i := range n {
			data, oob, from := b.message(i)
			if len(oob) > where {
				u.noteKernelDrops(oob, multicast)
			}
			if len(data) > u.cfg.MaxDatagram {
				u.oversized.Add(1)
				continue
			}
			if multicast && !u.ours(oob) {
				u.stray.Add(1)
				continue
			}
			u.received.Add(1)
			u.recvBytes.Add(uint64(len(data)))
			pkts = append(pkts, Packet{Data: append([]byte(nil), data...), Source: sources.name(from), Multicast: multicast, Received: now})
		}
		if len(pkts) == 0 {
			return // all stray or oversized: nothing to wake the node for
		}
		defer clear(pkts)
		if h := u.handler.Load(); h != nil {
			(*h)(pkts)
			return
		}
		for _, pkt := range pkts {
			select {
			case u.packets <- pkt:
			case <-u.closed:
				return
			default:
				u.overflow.Add(1) // as a full socket buffer would: the protocol repairs it
			}
		}
	}
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return
	}
	for !u.isClosed() {
		// An error other than the socket's closing is transient (ICMP
		// feedback on a UDP socket): keep reading.
		_ = b.read(raw, deliver)
	}
}

// sourceNames remembers the host:port text of the addresses datagrams come
// from: a group's members are few, and formatting the address of every
// datagram anew costs an allocation each. One reader's own.
type sourceNames map[netip.AddrPort]string

func (s sourceNames) name(ap netip.AddrPort) string {
	if name, ok := s[ap]; ok {
		return name
	}
	if len(s) >= 4096 {
		clear(s) // a flood of sources: start over rather than grow
	}
	name := ap.String() // as a member's address is written everywhere else
	s[ap] = name
	return name
}

// SetHandler makes the readers hand what they read to h (DirectTransport).
func (u *UDP) SetHandler(h func([]Packet)) { u.handler.Store(&h) }

// ours checks where a multicast datagram went, from the destination and
// interface its control messages give (IP_PKTINFO): it must be for our
// group and have arrived on our interface. Without control messages (a
// platform that gives none) the bound address is trusted. It parses by hand,
// as noteKernelDrops does: x/net's parser allocates for every datagram.
func (u *UDP) ours(oob []byte) bool {
	if len(oob) == 0 {
		return true
	}
	group := [4]byte(u.group.IP.To4())
	for len(oob) > 0 {
		h, data, rest, err := unix.ParseOneSocketControlMessage(oob)
		if err != nil {
			return false
		}
		oob = rest
		if h.Level != unix.IPPROTO_IP || h.Type != unix.IP_PKTINFO || len(data) < unix.SizeofInet4Pktinfo {
			continue
		}
		// struct in_pktinfo: the interface index, the local address, then
		// the header's destination address.
		ifindex := int(int32(binary.NativeEndian.Uint32(data)))
		return [4]byte(data[8:12]) == group && (ifindex == 0 || ifindex == u.cfg.Interface.Index)
	}
	return false
}

func isUnsupported(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) {
		err = op.Err
	}
	return errors.Is(err, errors.ErrUnsupported) || err.Error() == "not implemented"
}

func (u *UDP) isClosed() bool {
	select {
	case <-u.closed:
		return true
	default:
		return false
	}
}

// Send writes a batch of datagrams with as few system calls as it can.
func (u *UDP) Send(batch []Datagram) error {
	if u.isClosed() {
		return ErrClosed
	}
	ms := make([]ipv4.Message, 0, len(batch))
	for _, d := range batch {
		dst := u.group
		if d.To != "" {
			var err error
			if dst, err = u.resolve(d.To); err != nil {
				u.sendErrors.Add(1)
				continue
			}
		}
		ms = append(ms, ipv4.Message{Buffers: [][]byte{d.Data}, Addr: dst})
		if d.To == "" && u.filtersOwn && u.ebpf == nil {
			u.ownMulticasts.Add(1) // the classic filter's stand-in count (see overflows)
		}
	}
	var errs []error
	for len(ms) > 0 {
		n, err := u.ucp.WriteBatch(ms, 0)
		n = max(n, 0) // -1 when the first datagram failed
		if err != nil && isUnsupported(err) {
			if n, err = 0, u.writeOne(ms[0]); err == nil {
				n = 1
			}
		}
		for _, m := range ms[:n] {
			u.sent.Add(1)
			u.sentBytes.Add(uint64(len(m.Buffers[0])))
		}
		if err != nil && n < len(ms) {
			// ms[n] failed: skip it.
			u.sendErrors.Add(1)
			errs = append(errs, err)
			if ms[n].Addr == u.group && u.filtersOwn && u.ebpf == nil {
				u.ownMulticasts.Add(^uint64(0)) // not sent: the filter drops no copy of it
			}
			n++
		}
		ms = ms[n:]
	}
	return errors.Join(errs...)
}

func (u *UDP) writeOne(m ipv4.Message) error {
	_, err := u.ucp.WriteTo(m.Buffers[0], nil, m.Addr)
	return err
}

// resolve parses a host:port address once and remembers it.
func (u *UDP) resolve(addr string) (*net.UDPAddr, error) {
	u.addrMu.Lock()
	defer u.addrMu.Unlock()
	if a, ok := u.addrs[addr]; ok {
		return a, nil
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("group: bad member address %q: %w", addr, err)
	}
	if len(u.addrs) > 4096 {
		clear(u.addrs)
	}
	a := net.UDPAddrFromAddrPort(ap)
	u.addrs[addr] = a
	return a, nil
}

// Close leaves the group and closes both sockets.
func (u *UDP) Close() error {
	var err error
	u.once.Do(func() {
		close(u.closed)
		_ = u.mcp.LeaveGroup(u.cfg.Interface, &net.UDPAddr{IP: u.group.IP})
		err = errors.Join(u.mc.Close(), u.uc.Close())
		u.readers.Wait()
		if u.ebpf != nil {
			u.counts() // the last counts, kept for Stats: a closed filter answers nothing
			err = errors.Join(err, u.ebpf.Close())
		}
		close(u.packets)
	})
	return err
}
