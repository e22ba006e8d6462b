package simtest

import (
	"errors"
	"testing"

	"github.com/mcnode/mcnode/arbiter"
)

// A member that answers every ping keeps what it holds, for as long as it
// holds it, with the shortest lease the configuration accepts: the lease
// floor covers the time between renewals (two turns and their ping waits).
// Checked with and without loss, and under load.
func TestShortestLeaseKeepsAHealthyHolder(t *testing.T) {
	d := arbiter.DefaultConfig()
	floor := arbiter.LeaseFloor(d.TurnTicks, d.PingTimeoutTicks)
	for _, tc := range []struct {
		name string
		loss float64
		load bool
	}{{"idle", 0, false}, {"busy", 0, true}, {"idle, 2% loss", 0.02, false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Options{Seed: 7, Hosts: 4, Loss: tc.loss, Tweak: func(c *arbiter.Config) {
				c.Params.LeaseTicks = floor + 1
				c.Params.LeaseMarginTicks = 10
			}})
			s.RunTicks(100)
			var holder *Host
			for _, h := range s.Hosts {
				if h.Node.Joined() && !h.Node.IsServer() {
					holder = h
				}
			}
			if _, err := holder.Node.Acquire("held"); err != nil {
				t.Fatal(err)
			}
			s.collect(holder)
			if tc.load {
				w := NewWorkload(s, 2)
				holder.OnEvent = nil // the holder keeps "held"; the others churn r0 and r1
				w.Run(1500)
			} else {
				s.RunTicks(1500)
			}
			for _, e := range holder.Events {
				if e.Kind == arbiter.EventLost {
					t.Fatalf("a healthy member lost %q at T=%d: %s", e.Resource, e.T, e.Reason)
				}
			}
			if len(holder.Node.Held()) == 0 {
				t.Fatal("the holder never got the lock")
			}
			for _, v := range s.Check.Violations {
				t.Error(v)
			}
		})
	}
}

func TestLeaseBelowTheFloorIsRefused(t *testing.T) {
	cfg := arbiter.DefaultConfig()
	cfg.Inc, cfg.Addr = 1, "x"
	cfg.Params.LeaseTicks = arbiter.LeaseFloor(cfg.TurnTicks, cfg.PingTimeoutTicks)
	if _, err := arbiter.New(cfg); !errors.Is(err, arbiter.ErrConfig) {
		t.Fatalf("lease at the floor accepted: %v", err)
	}
}
