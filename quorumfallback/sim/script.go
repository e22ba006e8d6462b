package sim

import (
	"fmt"

	q "github.com/mcnode/mcnode/quorumfallback"
)

// Script runs machines over FIFO links that deliver only when told to, for
// replaying a paper's example message by message (as etcd's raft tests do
// with their in-file network).
type Script struct {
	Nodes []q.Protocol
	links map[[2]q.ID][]q.Message
	// Entered lists the nodes in the order they entered the critical
	// section; Tokens their fencing tokens.
	Entered []q.ID
	Tokens  []uint64
	// Sent counts the messages put on links.
	Sent int
	// Log has one line per message sent and per entry.
	Log []string
}

// NewScript wires up nodes; node i is nodes[i].
func NewScript(nodes []q.Protocol) *Script {
	return &Script{Nodes: nodes, links: map[[2]q.ID][]q.Message{}}
}

// Request makes node i request the critical section.
func (s *Script) Request(i q.ID) error {
	if err := s.Nodes[i].Request(); err != nil {
		return err
	}
	s.collect(i)
	return nil
}

// Release makes node i leave the critical section.
func (s *Script) Release(i q.ID) error {
	if err := s.Nodes[i].Release(); err != nil {
		return err
	}
	s.collect(i)
	return nil
}

// Down tells node i's machine, which must be q.FaultTolerant, that node j
// has failed (the runtime's Down), and sends what it answers.
func (s *Script) Down(i, j q.ID) {
	s.Nodes[i].(q.FaultTolerant).Down(j)
	s.collect(i)
}

// Pending is what is on the link from -> to, oldest first.
func (s *Script) Pending(from, to q.ID) []q.Message { return s.links[[2]q.ID{from, to}] }

// Deliver hands the oldest message on the link from -> to to its receiver
// and returns it.
func (s *Script) Deliver(from, to q.ID) (q.Message, error) {
	m, err := s.Drop(from, to)
	if err != nil {
		return m, err
	}
	if err := s.Nodes[to].Step(m); err != nil {
		return m, err
	}
	s.collect(to)
	return m, nil
}

// Drop loses the oldest message on the link from -> to, as a link that
// broke would, and returns it.
func (s *Script) Drop(from, to q.ID) (q.Message, error) {
	k := [2]q.ID{from, to}
	if len(s.links[k]) == 0 {
		return q.Message{}, fmt.Errorf("sim: nothing on the link %d -> %d", from, to)
	}
	m := s.links[k][0]
	s.links[k] = s.links[k][1:]
	return m, nil
}

// Quiet reports whether no message is in flight.
func (s *Script) Quiet() bool {
	for _, l := range s.links {
		if len(l) > 0 {
			return false
		}
	}
	return true
}

// Stabilize delivers until no message is in flight, links in a fixed
// order, and returns how many it delivered.
func (s *Script) Stabilize() (int, error) {
	delivered := 0
	for !s.Quiet() {
		for from := range s.Nodes {
			for to := range s.Nodes {
				for len(s.Pending(from, to)) > 0 {
					if _, err := s.Deliver(from, to); err != nil {
						return delivered, err
					}
					delivered++
				}
			}
		}
	}
	return delivered, nil
}

func (s *Script) collect(i q.ID) {
	rd := s.Nodes[i].Ready()
	for _, m := range rd.Messages {
		k := [2]q.ID{m.From, m.To}
		s.links[k] = append(s.links[k], m)
		s.Sent++
		s.Log = append(s.Log, m.String())
	}
	if rd.Entered {
		s.Entered = append(s.Entered, i)
		s.Tokens = append(s.Tokens, rd.Token)
		s.Log = append(s.Log, fmt.Sprintf("%d enters token=%d", i, rd.Token))
	}
}
