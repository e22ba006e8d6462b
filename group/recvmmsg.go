package group

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// readBatch reads datagrams from a socket many at a time (recvmmsg), into
// buffers it keeps from one read to the next.
//
// It also saves the read that finds the socket empty. The usual way to read
// a non-blocking socket reads until the kernel says "would block" and only
// then waits for the poller, which costs a system call for nothing at every
// wake-up: on a node that wakes for nearly every datagram (one lock passing
// from node to node), a third of the system calls it makes. A recvmmsg that
// returns fewer datagrams than it had room for stopped because the socket was
// empty: the reader then waits for the poller straight away. That is safe
// within one RawConn.Read, which does not clear the poller's readiness
// between calls of its function: a datagram that arrives after the read
// emptied the socket makes the socket readable again, which the poller
// records, and the wait returns at once.
type readBatch struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet4
	bufs  [][]byte
	oobs  [][]byte
}

func newReadBatch(n, size, oob int) *readBatch {
	b := &readBatch{hdrs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n), names: make([]unix.RawSockaddrInet4, n), bufs: make([][]byte, n), oobs: make([][]byte, n)}
	for i := range n {
		b.bufs[i], b.oobs[i] = make([]byte, size), make([]byte, oob)
		b.iovs[i].Base = &b.bufs[i][0]
		b.iovs[i].SetLen(size)
		h := &b.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		h.Iov = &b.iovs[i]
		h.SetIovlen(1)
		h.Control = &b.oobs[i][0]
	}
	return b
}

// read reads batches from the socket and hands the count of each to deliver,
// until the read fails: the socket closed, or an error the kernel reports
// on it (ICMP feedback on a UDP socket), which it returns.
func (b *readBatch) read(raw syscall.RawConn, deliver func(n int)) error {
	var rerr error
	drained := false // the last read emptied the socket: wait before the next
	err := raw.Read(func(fd uintptr) bool {
		for {
			if drained {
				drained = false
				return false
			}
			for i := range b.hdrs {
				b.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
				b.hdrs[i].Hdr.SetControllen(len(b.oobs[i]))
				b.hdrs[i].Hdr.Flags = 0
			}
			n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(len(b.hdrs)), unix.MSG_DONTWAIT, 0, 0)
			switch errno {
			case 0:
			case unix.EAGAIN:
				return false
			case unix.EINTR:
				continue
			default:
				rerr = errno
				return true
			}
			deliver(int(n))
			drained = int(n) < len(b.hdrs)
		}
	})
	if err != nil {
		return err
	}
	return rerr
}

// message returns the datagram i of the last batch read, its control
// messages and its source.
func (b *readBatch) message(i int) (data, oob []byte, from netip.AddrPort) {
	h := &b.hdrs[i]
	sa := &b.names[i]
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	return b.bufs[i][:h.Len], b.oobs[i][:h.Hdr.Controllen], netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port)
}
