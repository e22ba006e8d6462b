package group

// ReceiveForTest hands the node one datagram as its transport's reader
// does: the rate limit, then (keyed) the envelope, the header's checks,
// the decode and the machine's Step; what that causes is sent.
func (g *Group) ReceiveForTest(p Packet) { g.deliver([]Packet{p}) }

// ReceiveBatchForTest hands the node datagrams as one batch, as a reader
// that found them all waiting does: every one is stepped before anything
// is sent or any event handled, so a test can make events that a slower
// reader would handle apart arrive together.
func (g *Group) ReceiveBatchForTest(ps []Packet) { g.deliver(ps) }
