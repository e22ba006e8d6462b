package group

import (
	"errors"
	"time"

	"github.com/mcnode/mcnode/wire"
)

// Packet is one received datagram.
type Packet struct {
	Data []byte
	// Source is the sender's address (host:port). A node answers some
	// messages there directly, even before it knows the sender as a member.
	Source string
	// Multicast says the datagram arrived on the group address.
	Multicast bool
	// Received is when the transport read it.
	Received time.Time
}

// Datagram is one datagram to send: to the group when To is empty, else
// directly to the address To.
type Datagram struct {
	To   string
	Data []byte
}

// Transport carries one node's datagrams: multicast to the group, direct
// to one member, and everything received. UDP (ListenUDP) is the real one;
// group/memnet is an in-memory one for tests.
type Transport interface {
	// LocalAddr is the address other members reach this node at directly,
	// and the source address of everything it sends.
	LocalAddr() string
	// Send sends a batch of datagrams, in order. Delivery is best effort,
	// as with UDP: the protocol repairs losses.
	Send(batch []Datagram) error
	// Packets delivers what arrives, until Close.
	Packets() <-chan Packet
	// Close stops the transport and closes the Packets channel.
	Close() error
}

// DirectTransport is a Transport that can hand what it reads straight to a
// function, on its own reader goroutines, rather than through Packets: one
// goroutine wake-up less per datagram. What it read before SetHandler still
// comes through Packets.
type DirectTransport interface {
	Transport
	// SetHandler makes the readers call h with each batch they read, in
	// order. h may run on several readers at once, must not keep the
	// slice, and may keep the packets.
	SetHandler(h func([]Packet))
}

// AddressFilter is a Transport that can drop, before anyone reads them, the
// multicast datagrams addressed to other members (wire.Recipients): most of
// the members' requests and releases, which only the server, its backup and
// the next holder need.
type AddressFilter interface {
	// FilterFor drops from now on what is addressed to members other than
	// id; 0 drops nothing more.
	FilterFor(id wire.NodeID) error
	// Filtered counts the datagrams it dropped so.
	Filtered() uint64
}

// DropCounter is a Transport that drops some datagrams before the node sees
// them (too large, or sent to another group address), and counts them by
// reason. Status reports them with the node's own drops.
type DropCounter interface {
	Drops() map[string]uint64
}

// ErrClosed is returned by a transport used after Close.
var ErrClosed = errors.New("group: transport closed")
