package group_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
)

// What an embedder met (a review's program): a lease released before Leave
// releases again as a no-op after it, not as a lost lease; a Leave the
// group never answers says so (ErrLeaveUnconfirmed), though it closes the
// node all the same; Join closes the transport it was given when the
// configuration is refused, as it does on every other failure; and
// updates a subscriber did not read in time are counted.
func TestEmbedderContract(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(7)
		gs := joinAll(t, net, 3)
		l, err := gs[1].Acquire(context.Background(), "r")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}

		// Updates nobody reads overflow the subscription's buffer.
		_, cancel := gs[0].Subscribe("t")
		defer cancel()
		const sent = 600
		for range sent {
			if err := gs[1].Publish("t", []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second)
		synctest.Wait()
		st, err := gs[0].Status()
		if err != nil {
			t.Fatal(err)
		}
		if st.Stats.UpdatesDropped == 0 || st.Stats.UpdatesDropped >= sent {
			t.Errorf("%d updates unread by a subscriber that reads nothing: %d counted dropped", sent, st.Stats.UpdatesDropped)
		}

		// Node 2 leaves with the group's word; node 1, cut off, without.
		if err := gs[2].Leave(context.Background()); err != nil {
			t.Errorf("Leave of a node in a healthy group: %v", err)
		}
		net.Isolate(gs[1].Addr(), true)
		if err := gs[1].Leave(context.Background()); !errors.Is(err, group.ErrLeaveUnconfirmed) {
			t.Errorf("Leave of a node cut off from its group = %v, want ErrLeaveUnconfirmed", err)
		}
		if err := l.Release(); err != nil {
			t.Errorf("a lease released before Leave, released again after: %v, want nil", err)
		}
		gs[0].Close()

		cfg := memConfig(net)
		tr := &closeCount{Transport: cfg.Transport}
		cfg.Transport = tr
		cfg.Name = "" // refused
		if _, err := group.Join(context.Background(), cfg); !errors.Is(err, group.ErrConfig) {
			t.Fatalf("Join without a name = %v, want ErrConfig", err)
		}
		if tr.closed.Load() != 1 {
			t.Errorf("Join refused the configuration and closed its transport %d times, want once", tr.closed.Load())
		}
	})
}

// closeCount counts the closes of a transport.
type closeCount struct {
	group.Transport
	closed atomic.Int32
}

func (c *closeCount) Close() error {
	c.closed.Add(1)
	return c.Transport.Close()
}
