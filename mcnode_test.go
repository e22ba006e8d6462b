package mcnode_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/boottime"
	"github.com/mcnode/mcnode/quorumfallback/node"
)

// TestBothModes runs one check of the Locker contract on each mode: the
// same code, only the mode differs.
func TestBothModes(t *testing.T) {
	for _, mode := range []mcnode.Mode{mcnode.Multicast, mcnode.Quorum} {
		t.Run(string(mode), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			nodes := startGroup(ctx, mode, 3)
			defer func() {
				for _, n := range nodes {
					n.Close()
				}
			}()
			switch rt := mcnode.Unwrap(nodes[0]).(type) {
			case *group.Group:
				if mode != mcnode.Multicast {
					t.Errorf("Unwrap gave a *group.Group in %s mode", mode)
				}
			case *node.Node:
				if mode != mcnode.Quorum {
					t.Errorf("Unwrap gave a *node.Node in %s mode", mode)
				}
			default:
				t.Fatalf("Unwrap gave %T", rt)
			}
			l, err := nodes[1].Acquire(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := nodes[2].TryAcquire(ctx, "a"); !errors.Is(err, mcnode.ErrLocked) {
				t.Errorf("TryAcquire of a held lock: %v, want ErrLocked", err)
			}
			st, err := nodes[1].Status()
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode != mode || len(st.Members) != 3 || len(st.Held) != 1 || st.Held[0] != "a" || st.Sent == 0 {
				t.Errorf("status %+v: want mode %s, 3 members, holding a, messages sent", st, mode)
			}
			all, stop := nodes[0].Subscribe("")
			defer stop()
			if err := nodes[1].Publish("t", []byte("x")); err != nil {
				t.Fatal(err)
			}
			select {
			case u := <-all:
				if u.From != st.Self || u.Topic != "t" || string(u.Data) != "x" {
					t.Errorf("update %+v, want t=x from %d", u, st.Self)
				}
			case <-ctx.Done():
				t.Fatal("the update never came")
			}
			if err := nodes[1].Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-l.Lost():
			case <-time.After(5 * time.Second):
				t.Fatal("a lease of a closed node is not lost")
			}
			if l.Err() == nil {
				t.Error("a lost lease has no error")
			}
		})
	}
}

func TestStartRefusesAnUnknownMode(t *testing.T) {
	if _, err := mcnode.Start(context.Background(), mcnode.Config{Mode: "token-ring"}); !errors.Is(err, mcnode.ErrConfig) {
		t.Errorf("Start with mode token-ring: %v, want ErrConfig", err)
	}
}

// Subscriptions made, ended and raced against Close from many goroutines,
// in each mode: no panic (a channel closed twice), no leak, no race.
// A config naming an interface this host lacks is a config error, and a
// nil runtime is refused at Wrap, not at the first call (black-box round).
func TestStartRefusesAMissingInterfaceAndWrapANilNode(t *testing.T) {
	cfg := group.DefaultLANConfig()
	cfg.Name, cfg.Interface = "g", "nosuch0"
	if _, err := mcnode.Start(context.Background(), mcnode.Config{Multicast: cfg}); !errors.Is(err, mcnode.ErrConfig) || !strings.Contains(err.Error(), "nosuch0") {
		t.Errorf("Start on a missing interface: %v, want ErrConfig naming it", err)
	}
	for _, wrap := range []func(){func() { mcnode.Wrap((*group.Group)(nil)) }, func() { mcnode.Wrap((*node.Node)(nil)) }} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "nil") {
					t.Errorf("Wrap of a nil node: recovered %v, want a panic saying it is nil", r)
				}
			}()
			wrap()
		}()
	}
}

func TestSubscribeRacesClose(t *testing.T) {
	for _, mode := range []mcnode.Mode{mcnode.Quorum, mcnode.Multicast} {
		t.Run(string(mode), func(t *testing.T) {
			for iter := range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				nodes := startGroup(ctx, mode, 3)
				var wg sync.WaitGroup
				for g := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for k := range 50 {
							ch, stop := nodes[g%3].Subscribe("")
							if k%2 == 0 {
								stop()
								stop()
							}
							_ = nodes[(g+1)%3].Publish("t", []byte("x"))
							select {
							case <-ch:
							default:
							}
							if k%2 == 1 {
								go stop()
							}
						}
					}()
				}
				time.Sleep(time.Duration(iter) * 5 * time.Millisecond)
				for _, n := range nodes {
					n.Close()
				}
				wg.Wait()
				cancel()
			}
		})
	}
}

// Both modes refuse a config they cannot use with ErrConfig, and take and
// refuse the same topics.
func TestModesAgreeOnErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, cfg := range []mcnode.Config{{Mode: mcnode.Multicast}, {Mode: mcnode.Quorum}} {
		if _, err := mcnode.Start(ctx, cfg); !errors.Is(err, mcnode.ErrConfig) {
			t.Errorf("Start(%s, empty config) = %v, want ErrConfig", cfg.Mode, err)
		}
	}
	res := map[mcnode.Mode][]error{}
	for _, mode := range []mcnode.Mode{mcnode.Multicast, mcnode.Quorum} {
		nodes := startGroup(ctx, mode, 2)
		res[mode] = []error{nodes[0].Publish("", []byte("x")), nodes[0].Publish(strings.Repeat("t", 128), nil),
			nodes[0].Publish(strings.Repeat("t", 129), nil), nodes[0].Publish("t", make([]byte, 1025))}
		for _, name := range []string{"", strings.Repeat("n", 128), strings.Repeat("n", 129), "\xff"} {
			l, err := nodes[0].TryAcquire(ctx, name)
			if l != nil {
				l.Release()
			}
			res[mode] = append(res[mode], err)
		}
		for _, n := range nodes {
			n.Close()
		}
	}
	for i, what := range []string{"empty topic", "128-byte topic", "129-byte topic", "1025 bytes of data",
		"empty name", "128-byte name", "129-byte name", "name not UTF-8"} {
		if m, q := res[mcnode.Multicast][i], res[mcnode.Quorum][i]; (m == nil) != (q == nil) || errors.Is(m, mcnode.ErrLocked) != errors.Is(q, mcnode.ErrLocked) {
			t.Errorf("%s: multicast %v, quorum %v", what, m, q)
		}
		// An update is no resource: its errors must not say so.
		if m := res[mcnode.Multicast][i]; i < 4 && m != nil && strings.Contains(m.Error(), "resource name") {
			t.Errorf("%s: multicast %v: an update's error names a resource", what, m)
		}
	}
}

// A subscriber that stops reading and never cancels leaves no goroutine
// behind once the node stops.
func TestAbandonedSubscriptionEndsWithTheNode(t *testing.T) {
	for _, mode := range []mcnode.Mode{mcnode.Quorum, mcnode.Multicast} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		nodes := startGroup(ctx, mode, 2)
		_, _ = nodes[0].Subscribe("") // abandoned
		_ = nodes[1].Publish("t", []byte("x"))
		time.Sleep(500 * time.Millisecond)
		for _, n := range nodes {
			n.Close()
		}
		cancel()
		deadline := time.Now().Add(5 * time.Second)
		for {
			buf := make([]byte, 1<<20)
			n := strings.Count(string(buf[:runtime.Stack(buf, true)]), "mcnode.relay[")
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d relay goroutine(s) alive 5 s after the nodes closed", mode, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Both modes fail the same way, by the mode-independent errors: a lease
// lost when its node closes, and every call on the closed node.
func TestModesAgreeOnClosedAndLost(t *testing.T) {
	for _, mode := range []mcnode.Mode{mcnode.Multicast, mcnode.Quorum} {
		t.Run(string(mode), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			nodes := startGroup(ctx, mode, 2)
			defer nodes[1].Close()
			l, err := nodes[0].Acquire(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := nodes[1].TryAcquire(ctx, "a"); !errors.Is(err, mcnode.ErrLocked) || errors.Is(err, mcnode.ErrClosed) {
				t.Errorf("TryAcquire of a held lock: %v, want ErrLocked", err)
			}
			nodes[0].Close()
			select {
			case <-l.Lost():
			case <-ctx.Done():
				t.Fatal("the lease was not lost when its node closed")
			}
			if err := l.Err(); !errors.Is(err, mcnode.ErrLeaseLost) || errors.Is(err, group.ErrLeaseExpired) {
				t.Errorf("Err of a lease of a closed node: %v, want ErrLeaseLost (and not expired)", err)
			}
			if err := l.Release(); !errors.Is(err, mcnode.ErrLeaseLost) {
				t.Errorf("Release of a lease of a closed node: %v, want ErrLeaseLost", err)
			}
			if _, err := nodes[0].Acquire(ctx, "b"); !errors.Is(err, mcnode.ErrClosed) || errors.Is(err, mcnode.ErrLeaseLost) {
				t.Errorf("Acquire on a closed node: %v, want ErrClosed", err)
			}
			if _, err := nodes[0].TryAcquire(ctx, "b"); !errors.Is(err, mcnode.ErrClosed) {
				t.Errorf("TryAcquire on a closed node: %v, want ErrClosed", err)
			}
			if err := nodes[0].Publish("t", nil); !errors.Is(err, mcnode.ErrClosed) {
				t.Errorf("Publish on a closed node: %v, want ErrClosed", err)
			}
		})
	}
}

// A holder that leaves hands its lock on at once, in either mode: quorum
// mode's Leave closed the node without a release, and the lock stayed with
// the node that left for good (no failure handling on this transport). Its
// lease is lost and has no time left, though the node's own lease would
// run on; Leave of a left node fails with ErrClosed, Close does nothing.
func TestLeaveHandsTheLockOn(t *testing.T) {
	for _, mode := range []mcnode.Mode{mcnode.Multicast, mcnode.Quorum} {
		t.Run(string(mode), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			nodes := startGroup(ctx, mode, 3)
			defer nodes[1].Close()
			defer nodes[2].Close()
			l, err := nodes[0].Acquire(ctx, "a")
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				l2, err := nodes[1].Acquire(ctx, "a")
				if err == nil {
					l2.Release()
				}
				got <- err
			}()
			waiting := make(chan error, 1)
			go func() {
				// A second caller on the leaving node, queued behind the
				// lease: it fails, and asks nothing on the release.
				_, err := nodes[0].Acquire(ctx, "a")
				waiting <- err
			}()
			time.Sleep(50 * time.Millisecond) // both wait
			if err := nodes[0].Leave(ctx); err != nil {
				t.Fatalf("Leave: %v", err)
			}
			if err := <-waiting; !errors.Is(err, mcnode.ErrClosed) {
				t.Errorf("a caller waiting on the node that left: %v, want ErrClosed", err)
			}
			wait, cancelWait := context.WithTimeout(ctx, 3*time.Second)
			defer cancelWait()
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("the waiter on another node: %v", err)
				}
			case <-wait.Done():
				t.Fatal("the lock the node that left held was not handed on within 3 s")
			}
			select {
			case <-l.Lost():
			default:
				t.Error("the lease of the node that left is not lost")
			}
			if left, ok := l.TimeLeft(); ok && left > 0 {
				t.Errorf("a lost lease has %v left", left)
			}
			// Expires (and group.Lease.Remaining) must agree: they told
			// the node's own lease, still running, for a lock handed on.
			if e, ok := l.(interface{ Expires() time.Time }); ok {
				if at := e.Expires(); !at.IsZero() && at.After(time.Unix(0, int64(boottime.Now()))) {
					t.Errorf("a lost lease expires %v from now", at.Sub(time.Unix(0, int64(boottime.Now()))))
				}
			}
			if r, ok := l.(interface{ Remaining() time.Duration }); ok && r.Remaining() > 0 {
				t.Errorf("a lost lease has %v remaining", r.Remaining())
			}
			if err := nodes[0].Leave(ctx); !errors.Is(err, mcnode.ErrClosed) {
				t.Errorf("Leave of a left node: %v, want ErrClosed", err)
			}
			if err := nodes[0].Close(); err != nil {
				t.Errorf("Close of a left node: %v, want nil", err)
			}
		})
	}
}

// Release racing Close: the lease is either released or lost, and a lost
// one says so (Err, Release's error); quorum mode's returned node.ErrClosed
// with Err nil and no release sent, 81 times in 300 (found by review).
func TestReleaseRacingClose(t *testing.T) {
	for _, mode := range []mcnode.Mode{mcnode.Multicast, mcnode.Quorum} {
		t.Run(string(mode), func(t *testing.T) {
			runs := 100 // a group of two over the in-memory links starts in a millisecond
			if mode == mcnode.Multicast {
				runs = 4 // and in a second, waiting to hear a group before founding one
			}
			for i := range runs {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				nodes := startGroup(ctx, mode, 2)
				l, err := nodes[0].Acquire(ctx, "a")
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				var relErr error
				wg.Add(2)
				go func() { defer wg.Done(); relErr = l.Release() }()
				go func() { defer wg.Done(); nodes[0].Close() }()
				wg.Wait()
				if relErr != nil && (!errors.Is(relErr, mcnode.ErrLeaseLost) || l.Err() == nil) {
					t.Fatalf("run %d: Release racing Close: %v, Err %v: want nil, or ErrLeaseLost with Err set", i, relErr, l.Err())
				}
				nodes[1].Close()
				cancel()
			}
		})
	}
}
