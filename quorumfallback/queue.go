package quorumfallback

import "slices"

// Stamp is a request's priority, Lamport style: the sequence number, ties
// broken by the node's number. The smaller stamp precedes (Maekawa section
// 4 step 2; Cao and Singhal section 3.1).
type Stamp struct {
	Seq  uint64
	Node ID
}

// NoStamp is the paper's (max, max): no request.
var NoStamp = Stamp{Seq: ^uint64(0), Node: None}

// Precedes reports whether s has priority over t.
func (s Stamp) Precedes(t Stamp) bool {
	if s.Seq != t.Seq {
		return s.Seq < t.Seq
	}
	return uint(s.Node) < uint(t.Node) // None (max) comes last
}

// Queue is a priority queue of requests, the most preceding first. Nodes
// have one request outstanding at a time, so it holds at most one stamp per
// node; it is small (at most N) and kept sorted.
type Queue []Stamp

// Push inserts s in order.
func (q *Queue) Push(s Stamp) {
	i, _ := slices.BinarySearchFunc(*q, s, compare)
	*q = slices.Insert(*q, i, s)
}

// Head is the most preceding request, or NoStamp if the queue is empty.
func (q Queue) Head() Stamp {
	if len(q) == 0 {
		return NoStamp
	}
	return q[0]
}

// Pop removes and returns the most preceding request.
func (q *Queue) Pop() Stamp {
	s := (*q)[0]
	*q = (*q)[1:]
	return s
}

// Remove deletes node's request, reporting whether there was one.
func (q *Queue) Remove(node ID) (Stamp, bool) {
	for i, s := range *q {
		if s.Node == node {
			*q = slices.Delete(*q, i, i+1)
			return s, true
		}
	}
	return NoStamp, false
}

// Find returns node's request, if queued.
func (q Queue) Find(node ID) (Stamp, bool) {
	for _, s := range q {
		if s.Node == node {
			return s, true
		}
	}
	return NoStamp, false
}

func compare(a, b Stamp) int {
	switch {
	case a.Precedes(b):
		return -1
	case b.Precedes(a):
		return 1
	}
	return 0
}
