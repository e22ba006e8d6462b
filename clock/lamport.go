package clock

// Lamport is a Lamport logical clock (Lamport 1978, the clock condition):
// Tick before every local event or send, Observe on every receive. The zero
// value is a clock at 0. It is not safe for concurrent use; like the state
// machines that own it, it is driven by one goroutine.
type Lamport struct {
	now uint64
}

// Now returns the current value without advancing it.
func (l *Lamport) Now() uint64 { return l.now }

// Tick advances the clock for a local event and returns the new value, which
// is the timestamp to put on a message being sent.
func (l *Lamport) Tick() uint64 {
	l.now++
	return l.now
}

// Observe merges a timestamp received on a message: the clock moves past both
// its own value and the remote one, so the receive is ordered after the send.
func (l *Lamport) Observe(remote uint64) uint64 {
	l.now = max(l.now, remote) + 1
	return l.now
}

// Stamp is a Lamport timestamp made total by the node ID that issued it, as
// the quorum protocols use to order competing requests (Ricart and Agrawala
// 1981; Maekawa 1985, the sequence number and node pair).
type Stamp struct {
	Time uint64
	Node uint64
}

// Less reports whether s is ordered before o: smaller time first, then the
// smaller node ID.
func (s Stamp) Less(o Stamp) bool {
	if s.Time != o.Time {
		return s.Time < o.Time
	}
	return s.Node < o.Node
}
