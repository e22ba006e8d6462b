// Package group is the mcnode runtime: it runs one node of a rotating-arbiter
// group (package arbiter) over a transport, and is the public Go API.
//
// # Joining
//
// Join finds the group cfg names on the multicast address and becomes a
// member; if nobody answers within JoinTimeout (and Bootstrap is set) it
// founds the group instead. DefaultLANConfig suits machines on one LAN
// segment; DefaultLocalConfig suits several nodes on one host.
//
// # Locks
//
// Acquire waits for a named resource in the group's FIFO order and returns a
// Lease. Hold the lease while you use the resource and Release it after. The
// lease's Token is a fencing token, strictly increasing per resource; its
// Lost channel closes if the group takes the resource back (this node lost
// contact for longer than the lease, or was removed). Several goroutines of
// one process may Acquire the same name: they queue behind each other.
// Expires says when this node's lease runs out unless the group renews it: a
// holder that may not hear Lost in time (its own runtime may be stopped)
// stops using the resource by then, as `mcnode lock` does for its command.
//
// # Failures
//
// The group survives its server: when the server stops answering, its
// backup takes over in a new epoch within TakeoverTimeout and a claim
// (EventTakeoverStarted, EventEpoch). Only a side of the network that holds a
// majority of the group decides; on a minority side nothing is granted
// (EventQuorumLost), a wait that times out says so (NoQuorumError), a
// TryAcquire does not wait for an answer that cannot come (ErrNoAnswer),
// and the node rejoins the majority by itself when the network heals: a
// node that has been a member never founds a group again by itself. With a
// MemberFile, a process that stopped without leaving can tell, when it
// starts again, that it must not found one either (WasMember). Status
// reports the epoch, the backup, the quorum and how long ago the server was
// heard. A holder's lease is renewed by each ping of the server it answers,
// so a holder in touch with the group keeps its locks through a takeover.
//
// Ticks and leases are counted on the Clock: BootClock by default
// (CLOCK_BOOTTIME, which keeps running through a suspend of the machine),
// SystemClock in tests (a testing/synctest bubble fakes it). After a stall
// the runtime moves the machine's time forward in one step, so a node that
// was paused finds its lease expired before it acts on anything that
// waited in its socket.
//
// # The runtime
//
// Each Group steps its state machine under one lock, on the goroutine that
// has the work: a ticker for time, the transport's readers for the
// datagrams they receive, the callers of the API for their calls. Each then
// sends what the machine produced, packing consecutive messages for one
// address into shared datagrams. The UDP transport (ListenUDP) joins the
// group on one interface and sends everything from its unicast socket, so
// that a datagram's source address is where answers go. group/memnet is an
// in-memory transport for tests; run it inside a testing/synctest bubble to
// test with virtual time.
package group
