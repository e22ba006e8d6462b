// Package fanout hands application updates to the subscriptions that want
// them, by topic, for both runtimes (group and quorumfallback/node). A Hub
// has no lock: its node's own (the group's machine lock, the quorum node's
// loop) guards it.
package fanout

import (
	"maps"
	"slices"
)

// Capacity is each subscription channel's buffer: updates beyond it, not
// read in time, are dropped rather than stall the node.
const Capacity = 256

// Hub is a node's subscriptions.
type Hub[T any] struct {
	subs map[int]*sub[T]
	seq  int
}

type sub[T any] struct {
	topic string
	ch    chan T
}

// Add subscribes to topic ("" for every topic) and returns the channel and
// the subscription's ID for Remove.
func (h *Hub[T]) Add(topic string) (<-chan T, int) {
	if h.subs == nil {
		h.subs = map[int]*sub[T]{}
	}
	h.seq++
	s := &sub[T]{topic: topic, ch: make(chan T, Capacity)}
	h.subs[h.seq] = s
	return s.ch, h.seq
}

// Remove ends a subscription and closes its channel; an ID already removed
// is ignored.
func (h *Hub[T]) Remove(id int) {
	if s, ok := h.subs[id]; ok {
		delete(h.subs, id)
		close(s.ch)
	}
}

// Deliver hands v, published on topic, to every subscription that wants it,
// in the order they subscribed, and returns how many were too full to take
// it.
func (h *Hub[T]) Deliver(topic string, v T) (dropped int) {
	for _, id := range slices.Sorted(maps.Keys(h.subs)) {
		s := h.subs[id]
		if s.topic != "" && s.topic != topic {
			continue
		}
		select {
		case s.ch <- v:
		default:
			dropped++
		}
	}
	return dropped
}

// CloseAll ends every subscription, when the node stops.
func (h *Hub[T]) CloseAll() {
	for id := range h.subs {
		h.Remove(id)
	}
}
