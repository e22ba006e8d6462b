// Package qnet is the transport of mcnode's quorum mode. The mutual-exclusion
// protocols of package quorumfallback assume N nodes fully connected by
// reliable FIFO channels; qnet provides them over TCP between a fixed list of
// nodes, node i being index i in the list.
//
// # Channels
//
// Every node dials every other node and sends its messages for that node on
// the connection it dialled: one TCP connection per ordered pair, so that
// the order per pair is TCP's. Connections a node accepts carry other
// nodes' messages in. A connection opens with a hello naming the dialling
// node and the group's setup (Config.Hello); a node refuses a hello of
// another setup, so that two groups, or one group configured two ways, never
// exchange messages.
//
// Send never waits for the network: it queues the frame for the peer's
// writer goroutine, which dials (again and again, so nodes may start in any
// order) and writes what accumulated in as few system calls as it can.
//
// # What the papers assume and TCP does not give
//
// TCP is reliable only while a connection lasts. If one breaks (a node
// restarts, a network fault outlasts TCP's retransmissions), frames written
// to it may be lost, and the papers' reliable-channel assumption is broken:
// the mesh logs a warning, counts it, redials and carries on, and the
// runtime above must cope (with timeouts, or by restarting the group).
// Without Config.Heartbeat, where nothing above copes, the connections keep
// no TCP keepalive: Go's default (probes from 15 s idle, given up after
// 150 s) broke every connection of a network split for longer than that,
// and the frames in flight with them, and the protocols without failure
// handling then waited for those frames for good. Without it a split heals
// with nothing lost for as long as TCP retransmits what is in flight
// (net.ipv4.tcp_retries2: about 15 minutes by default). With Heartbeat the
// heartbeats tell a silent peer, and keepalive is left as Go sets it.
//
// A node that restarts is worse: it comes back without the arbiter state
// (whom it granted, who waits) the others rely on, and taking it back could
// grant one lock twice. So a node remembers each peer's incarnation from its
// first hello and refuses a hello with another one, logging why: the
// restarted node can never reach it, and whatever needs the restarted node
// stalls, which is safe. Restart every node of a group together. With
// Config.Heartbeat (a runtime that handles failures: Maekawa's, in package
// node) a restarted node is refused only until the runtime has put its
// previous incarnation down (Forget), and an incarnation the runtime
// suspects is refused for good (Refuse), with an answer that tells it so
// (Failed); see liveness.go.
// Nodes are not authenticated: anything that can reach a node's port and
// knows the Hello can speak for any node. Run the mesh on a trusted network.
//
// # Wire format
//
// A hello is the magic "mcq6", the dialler's node index and its incarnation
// (a random number drawn when the mesh starts) as uvarints, the
// length of its Hello as a uvarint and the Hello; the answer is one byte
// (accepted, or why not). Then the dialler sends frames, each a uvarint
// length and a body (see AppendFrame). The acceptor sends nothing more
// but, when it closes, a goodbye byte (0xff), so that the dialler can tell
// a node that shut down from a broken connection.
package qnet
