package bench

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

func TestZZProbeClasses(t *testing.T) {
	for _, n := range []int{4, 16, 64, 256} {
		s := simtest.New(simtest.Options{Seed: 1, Hosts: n, MinDelay: multicastT, MaxDelay: multicastT,
			Tweak: func(c *arbiter.Config) { c.Params.MaxMembers = max(uint32(n), c.Params.MaxMembers) }})
		w := simtest.NewWorkload(s, 1)
		w.HoldMin, w.HoldMax = 1, 1
		w.ThinkMin, w.ThinkMax = 0, 0
		w.Stopped = true
		allJoined := func() bool {
			return !slices.ContainsFunc(s.Hosts, func(h *simtest.Host) bool { return !h.Node.Joined() })
		}
		w.RunUntil(s.Now+int64(n+200)*100*simtest.SubTicks, allJoined)
		w.Stopped = false
		warm := s.Stats.Entries + n
		w.RunUntil(s.Now+int64(n+100)*100*simtest.SubTicks, func() bool { return s.Stats.Entries >= warm })
		sent := maps.Clone(s.Stats.Datagrams)
		e0, t0 := s.Stats.Entries, s.Now
		w.RunUntil(s.Now+600*20*simtest.SubTicks, func() bool { return s.Stats.Entries-e0 >= 600 })
		e := float64(s.Stats.Entries - e0)
		line := fmt.Sprintf("N=%d entries=%v ticks=%d:", n, e, (s.Now-t0)/simtest.SubTicks)
		for _, c := range wire.Classes {
			if d := s.Stats.Datagrams[c] - sent[c]; d > 0 {
				line += fmt.Sprintf(" %s=%.3f", c, float64(d)/e)
			}
		}
		t.Log(line)
	}
}
