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
//
// # Failures
//
// The papers assume nodes that never fail. Maekawa's protocol and Cao and
// Singhal's (their section 6) go on when nodes fail if the coterie has
// substitute quorums: the tree (Agrawal and El Abbadi, coterie.TreeQuorum)
// and the majority (coterie.Substitute). A machine that can
// (FaultTolerant) learns of a failure through Down(i): it drops i's
// request and the permission i held, and a node waiting for a quorum that
// holds i gives back what it got (a RELEASE, which also withdraws a
// request still queued) and asks a substitute quorum. Cao and Singhal's
// arbiter first asks the nodes i may have passed its permission to by
// proxy whether they hold it (Query, Answer; see package caosinghal). A
// finite projective plane or a grid has no substitute: such a node waits
// until i is Up again.
//
// The other protocols are not adapted, and a failed node stalls every
// request that needs it:
//
//   - Ricart and Agrawala's could ask "every live node" instead of every
//     node, but two such sets need not meet: with the group split in two,
//     each side would put the other down and grant, and a two-node group
//     split by one cut link would have two holders. Failure handling needs
//     quorums that still intersect once substitutes replace the dead, as a
//     coterie's do.
//   - Kakugawa's requests carry no identity (no timestamps, no sequence
//     numbers: the paper's point). Giving a request up for a substitute
//     quorum needs a late PERMIT for the request given up told apart from
//     one for the next: the protocol would have to number its requests,
//     and would no longer be the paper's.
//   - The central coordinator holds every lock's queue alone: its failure
//     needs another coordinator elected and the queues rebuilt, which is
//     what the multicast mode does with its replicated log.
//
// A suspected node may be alive (a link cut), so Down must not free what
// it still uses. A runtime that calls Down must keep these rules, which the
// seeded simulation checks (sim.Faults, with crashes and cut links, holders
// and arbiters alike), and package node keeps (its failover.go):
//
//   - A node that has not heard from i for a detection timeout refuses that
//     incarnation of i from then on and tells every node (failure(i)),
//     which refuse it too. A refused node learns it, and comes back as a
//     new incarnation. Where two nodes refused each other (a cut both
//     ways), the one that refused more than half the group is the one cut
//     off: only it takes the other's refusal as its own failure.
//   - A node calls Down(i) a lease plus a margin after it last heard from
//     i, and only then accepts i's next incarnation (Up). Messages still
//     queued for the incarnation put down are dropped, never handed to the
//     next one.
//   - A holder loses its critical section a lease minus the margin after it
//     last heard from a member of its quorum (Quorum), before any of them
//     may act on Down. "Heard from" is the send time of the last heartbeat
//     of the holder's that the member echoed: the member received it at or
//     after that time, so its own "last heard" is never earlier, and the
//     margin only has to cover the hosts' clocks running at different
//     rates over a lease (and a holder paused longer than its margin, which
//     fencing tokens are for). The simulation, whose clocks agree, takes
//     both as the moment the link went down.
//   - A new incarnation acts on nothing for a lease plus the margin, so that
//     every permission its predecessor gave has run out.
//   - A grant's fencing token is at least the time (RaiseTokens before
//     every step: a hybrid clock). A holder that died took the highest
//     token of its grants with it; every grant made after its lease ran
//     out is above that token, as long as the hosts' clocks differ by
//     less than the lease.
package quorumfallback
