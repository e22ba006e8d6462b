package qnet

import (
	"sync"
	"time"
)

// The kinds of news a mesh warns of sparingly (see news).
const (
	newsNoHello         = iota // a connection that does not open with a hello
	newsCutHello               // one closed during its hello
	newsBadHello               // a hello that does not parse
	newsUnauthenticated        // a TLS handshake that failed
	newsCrowded                // one closed in its hello for a newer one: too many at once
	newsBadFrame               // a frame that does not decode
	newsBadSender              // a frame not from its connection's node, or not for this one
	newsForeignGroup           // a hello of another group
	newsKinds
)

// newsEvery is how often news of one kind is logged at most.
const newsEvery = time.Minute

// news limits the warnings about strangers and bad frames: any host may
// open connections to a mesh, and a peer may misbehave; a warning for each
// would grow the log without bound.
// Each kind is logged the first time, then at most once every newsEvery,
// with the number left unlogged since; a kind never seen is logged at once,
// however many of the others came before.
type news struct {
	mu      sync.Mutex
	last    [newsKinds]time.Time
	skipped [newsKinds]uint64
	now     func() time.Time // time.Now; a test's clock
}

// allow reports whether news of kind k is logged now, and how many of
// that kind went unlogged since the last that was.
func (n *news) allow(k int) (skipped uint64, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	if n.now != nil {
		now = n.now()
	}
	if !n.last[k].IsZero() && now.Sub(n.last[k]) < newsEvery {
		n.skipped[k]++
		return 0, false
	}
	skipped, n.skipped[k] = n.skipped[k], 0
	n.last[k] = now
	return skipped, true
}
