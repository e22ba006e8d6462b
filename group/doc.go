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
//
// # The runtime
//
// Each Group owns one goroutine that alone touches the state machine: it
// feeds it ticks, the datagrams the transport receives and the API's calls,
// and sends what the machine produces, packing consecutive messages for one
// address into shared datagrams. The UDP transport (ListenUDP) joins the
// group on one interface and sends everything from its unicast socket, so
// that a datagram's source address is where answers go. group/memnet is an
// in-memory transport for tests; run it inside a testing/synctest bubble to
// test with virtual time.
package group
