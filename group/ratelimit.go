package group

import (
	"container/list"
	"time"
)

// limiter is a token bucket per source address: each address may send rate
// datagrams a second on average, and a second's worth at once: a member
// sends its bursts unpaced (a state transfer to a newcomer is one datagram
// per chunk, a thousand for a large state), and each retry of one would
// meet the same cut. It is checked before
// anything else is done with a datagram (opening it, decoding it), so that
// one address flooding the group costs each member a map lookup per
// datagram, not a decryption or a decode, and cannot crowd out the others.
//
// Sources are kept in least-recently-seen order and at most maxSources of
// them: a flood from ever new addresses evicts the oldest, whose buckets
// were full anyway unless they too sent a lot. Guarded by the machine's lock.
type limiter struct {
	rate, burst float64
	buckets     map[string]*list.Element
	order       *list.List // of *bucket, most recently seen first
}

type bucket struct {
	source string
	tokens float64
	last   time.Time
}

// maxSources bounds the limiter's memory.
const maxSources = 4096

func newLimiter(rate int) *limiter {
	return &limiter{rate: float64(rate), burst: max(float64(rate), 64), buckets: map[string]*list.Element{}, order: list.New()}
}

// allow takes a token from source's bucket, and reports whether there was
// one.
func (l *limiter) allow(source string, now time.Time) bool {
	e, ok := l.buckets[source]
	if !ok {
		if l.order.Len() >= maxSources {
			oldest := l.order.Back()
			l.order.Remove(oldest)
			delete(l.buckets, oldest.Value.(*bucket).source)
		}
		e = l.order.PushFront(&bucket{source: source, tokens: l.burst, last: now})
		l.buckets[source] = e
	} else {
		l.order.MoveToFront(e)
	}
	b := e.Value.(*bucket)
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(l.burst, b.tokens+dt*l.rate)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
