package group

// ReceiveForTest hands the node one datagram as its transport's reader
// does: the rate limit, then (keyed) the envelope, the header's checks,
// the decode and the machine's Step; what that causes is sent.
func (g *Group) ReceiveForTest(p Packet) { g.deliver([]Packet{p}) }
