// Package quorumfallback holds what the point-to-point mutual-exclusion
// protocols of mcnode's quorum mode share: the Message they exchange, the
// Protocol interface every one of them implements, and the Ready a machine
// hands its runtime.
//
// The protocols themselves live in one package each (maekawa, caosinghal,
// kakugawa, ricartagrawala, central), the quorum constructions in coterie,
// the seeded simulation in sim, the TCP links in qnet and the runtime that
// drives them over those links in node. Like package arbiter, the machines
// do no I/O, start no goroutine and read no clock: a runtime feeds them
// calls and messages and sends what Ready returns.
//
// # The model
//
// The papers assume N nodes that never fail, fully connected by reliable
// FIFO channels (Maekawa 1985 section 1, Cao and Singhal section 2, Kakugawa
// et al. section 2). Nodes are numbered 0..N-1; every node is at once a
// requester and an arbiter for the nodes whose quorums contain it. One
// machine manages one resource: the runtime keeps a machine per resource
// name, and each node has at most one request outstanding per resource at a
// time, as every paper assumes.
//
// A message a node sends to itself (it is in its own quorum) is handled
// inside the machine at once and never appears in Ready: the papers count
// only messages between nodes ("node i pretends to have received a
// REQUEST", Maekawa step 1).
//
// # Using a machine
//
//	m.Request()           // wants the resource
//	rd := m.Ready()        // messages to send; rd.Entered once it holds it
//	m.Step(msg)            // for each message that arrives
//	m.Release()            // done with it
//
// Ready may be called at any time; each call returns what accumulated since
// the last and clears it.
//
// # Fencing tokens
//
// Beyond the papers, every grant carries a counter so that a holder gets a
// fencing token that increases strictly from one critical section to the
// next, as in multicast mode: each arbiter remembers the highest token it
// has seen, a grant carries that counter plus one, a holder's token is the
// highest of its grants, and its release carries it back. Two consecutive
// holders share an arbiter (the intersection property), which saw the first
// holder's token before granting the second. This adds one integer to
// messages the protocols send anyway; it sends none of its own. A machine's
// counter may start above zero (Protocol.RaiseTokens): the runtime starts it
// at the wall clock in microseconds, so that tokens keep increasing when
// the nodes restart and the counters with them.
package quorumfallback
