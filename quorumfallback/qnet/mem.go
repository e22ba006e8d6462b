package qnet

import (
	"encoding/binary"
	"fmt"
	"sync"
)

// MemEnd is one node's end of an in-memory network made by NewMemNetwork:
// reliable FIFO channels between the nodes of one process, for runtime
// tests. Like a Mesh it checks and encodes every frame, so that what it
// accepts the TCP mesh accepts too.
type MemEnd struct {
	self int
	ends []*MemEnd
	in   chan Inbound
	wake chan struct{} // capacity 1: "the queue is not empty"
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu     sync.Mutex
	queue  []Inbound
	closed bool
}

// NewMemNetwork returns the ends of an in-memory network of n nodes; end i
// is node i. Each end runs a goroutine until it is closed.
func NewMemNetwork(n int) []*MemEnd {
	if n < 1 {
		panic(fmt.Sprintf("qnet: NewMemNetwork(%d): want at least one node", n))
	}
	ends := make([]*MemEnd, n)
	for i := range ends {
		ends[i] = &MemEnd{
			self: i,
			ends: ends,
			in:   make(chan Inbound, InboundBuffer),
			wake: make(chan struct{}, 1),
			stop: make(chan struct{}),
			done: make(chan struct{}),
		}
		go ends[i].deliver()
	}
	return ends
}

// Send queues f for node to and returns at once. Frames for a closed node
// are discarded, as a TCP mesh would queue them forever.
func (e *MemEnd) Send(to int, f Frame) error {
	if err := checkSend(e.self, len(e.ends), to, f); err != nil {
		return err
	}
	// A round trip through the codec checks the frame as a Mesh does and
	// gives the receiver its own copy.
	b, err := AppendFrame(nil, f)
	if err != nil {
		return err
	}
	_, k := binary.Uvarint(b)
	copied, err := DecodeFrame(b[k:])
	if err != nil {
		panic(fmt.Sprintf("qnet: frame %v does not survive the codec: %v", f.Msg, err))
	}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return ErrClosed
	}
	dst := e.ends[to]
	dst.mu.Lock()
	if !dst.closed {
		dst.queue = append(dst.queue, Inbound{From: e.self, Frame: copied})
	}
	dst.mu.Unlock()
	select {
	case dst.wake <- struct{}{}:
	default:
	}
	return nil
}

// deliver moves queued frames to the Inbound channel, so that Send never
// waits for the receiver.
func (e *MemEnd) deliver() {
	defer close(e.done)
	for {
		e.mu.Lock()
		q := e.queue
		e.queue = nil
		e.mu.Unlock()
		for _, in := range q {
			select {
			case e.in <- in:
			case <-e.stop:
				return
			}
		}
		select {
		case <-e.wake:
		case <-e.stop:
			return
		}
	}
}

// Inbound returns the frames received, in order per sender. It is closed
// after Close.
func (e *MemEnd) Inbound() <-chan Inbound { return e.in }

// Close stops the end; frames queued for it are discarded.
func (e *MemEnd) Close() error {
	e.once.Do(func() {
		e.mu.Lock()
		e.closed, e.queue = true, nil
		e.mu.Unlock()
		close(e.stop)
		<-e.done
		close(e.in)
	})
	return nil
}
