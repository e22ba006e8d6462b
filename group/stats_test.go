package group_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/mcnode/mcnode/group/memnet"
	"github.com/mcnode/mcnode/wire"
)

// The bytes by class add up to the totals, and each class's bytes fit the
// datagrams it counts: at least a header each, at most the largest
// datagram.
func TestBytesByClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gs := joinAll(t, memnet.New(1), 3)
		for i := range 10 {
			l, err := gs[i%3].Acquire(context.Background(), "r")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(); err != nil {
				t.Fatal(err)
			}
		}
		if err := gs[1].Publish("topic", make([]byte, 500)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		largest := uint64(memConfig(memnet.New(1)).MaxDatagram)
		for i, g := range gs {
			st, err := g.Status()
			if err != nil {
				t.Fatal(err)
			}
			s := st.Stats
			check := func(what string, n, bytes map[wire.Class]uint64) (sum uint64) {
				for c, b := range bytes {
					if n[c] == 0 || b < n[c]*wire.HeaderLen || b > n[c]*largest {
						t.Errorf("node %d: %s: %d bytes of %s in %d datagrams", i, what, b, c, n[c])
					}
					sum += b
				}
				if len(n) != len(bytes) {
					t.Errorf("node %d: %s: datagrams of %d classes, bytes of %d", i, what, len(n), len(bytes))
				}
				return sum
			}
			if sum := check("sent", s.Sent, s.SentBytesBy); sum != s.SentBytes {
				t.Errorf("node %d: bytes sent by class add up to %d, in all %d", i, sum, s.SentBytes)
			}
			if sum := check("received", s.ReceivedBy, s.ReceivedBytesBy); sum == 0 || sum > s.ReceivedBytes {
				t.Errorf("node %d: bytes received by class add up to %d, in all %d", i, sum, s.ReceivedBytes)
			}
			// The update's 500 bytes are counted as updates, sent by
			// node 1, received by the others.
			if b := s.SentBytesBy[wire.ClassUpdate] + s.ReceivedBytesBy[wire.ClassUpdate]; b < 500 {
				t.Errorf("node %d: %d bytes of updates sent and received", i, b)
			}
		}
	})
}
