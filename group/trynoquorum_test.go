package group_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/group/memnet"
)

// A TryAcquire of a free lock on a node whose two peers are gone (closed,
// not left: the group still counts them, so the node reaches no majority)
// returns within its bound, saying that the group did not answer and why,
// rather than wait for an answer that cannot come (it waited until Close);
// and once the node knows it reaches no majority, a TryAcquire returns at
// once. Whether the survivor was the server or a member.
func TestTryAcquireWithoutQuorumIsBounded(t *testing.T) {
	for _, survivor := range []string{"server", "member"} {
		t.Run(survivor, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				gs := joinAll(t, memnet.New(12), 3)
				st, err := gs[0].Status()
				if err != nil {
					t.Fatal(err)
				}
				var left *group.Group
				for _, g := range gs {
					if (g.ID() == st.Server) == (survivor == "server") && left == nil {
						left = g
					} else {
						g.Close()
					}
				}
				// The bound TryAcquire documents for DefaultLANConfig's
				// timings, which DefaultLocalConfig keeps.
				const bound = 2500 * time.Millisecond
				try := func() (time.Duration, error) {
					start := time.Now()
					done := make(chan error, 1)
					go func() {
						l, err := left.TryAcquire(context.Background(), "free-lock")
						if l != nil {
							l.Release()
						}
						done <- err
					}()
					select {
					case err := <-done:
						return time.Since(start), err
					case <-time.After(30 * time.Second):
						t.Fatal("TryAcquire without a majority still waits after 30s")
						return 0, nil
					}
				}
				took, err := try()
				t.Logf("TryAcquire after the peers closed: %v after %v", err, took)
				if took > bound || !errors.Is(err, group.ErrNoAnswer) || !errors.Is(err, group.ErrNoQuorum) || errors.Is(err, group.ErrLocked) {
					t.Fatalf("TryAcquire without a majority: %v after %v; want ErrNoAnswer and ErrNoQuorum within %v", err, took, bound)
				}
				var nq *group.NoQuorumError
				if !errors.As(err, &nq) || nq.Quorum.Held {
					t.Fatalf("TryAcquire without a majority: %v; want a NoQuorumError without the quorum held", err)
				}
				took, err = try()
				t.Logf("TryAcquire again: %v after %v", err, took)
				if took != 0 || !errors.Is(err, group.ErrNoQuorum) || !errors.Is(err, group.ErrNoAnswer) {
					t.Fatalf("TryAcquire with the majority known lost: %v after %v; want ErrNoQuorum at once", err, took)
				}
			})
		})
	}
}

// A TryAcquire whose request never reaches the server, on a node that
// still hears a server with a majority (what it sends is lost), gives up
// after the bound TryAcquire documents, saying the group did not answer:
// not ErrLocked, which it does not know, nor ErrNoQuorum, which it has no
// reason to think.
func TestTryAcquireWithoutAnswerIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New(13)
		gs := joinAll(t, net, 3)
		st, err := gs[0].Status()
		if err != nil {
			t.Fatal(err)
		}
		mute := gs[0]
		if mute.ID() == st.Server {
			mute = gs[1]
		}
		net.Mute(mute.Addr(), true)
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			l, err := mute.TryAcquire(context.Background(), "free-lock")
			if l != nil {
				l.Release()
			}
			done <- err
		}()
		const bound = 2500 * time.Millisecond
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("TryAcquire with no answer still waits after 30s")
		}
		took := time.Since(start)
		t.Logf("TryAcquire with no answer: %v after %v", err, took)
		if took > bound+100*time.Millisecond || !errors.Is(err, group.ErrNoAnswer) || errors.Is(err, group.ErrLocked) {
			t.Fatalf("TryAcquire with no answer: %v after %v; want ErrNoAnswer within %v", err, took, bound)
		}
	})
}
