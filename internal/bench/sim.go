package bench

import (
	"fmt"
	"maps"
	"slices"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/localgroup"
	"github.com/mcnode/mcnode/internal/simtest"
	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/protocols"
	"github.com/mcnode/mcnode/quorumfallback/qnet"
	"github.com/mcnode/mcnode/quorumfallback/sim"
	"github.com/mcnode/mcnode/wire"
)

// SimOptions configures the simulation layer.
type SimOptions struct {
	Seed int64
	// Entries is how many critical-section entries a heavy-load run
	// measures (at least: a quorum run gives every node the same number);
	// LightEntries a light-load run's.
	Entries, LightEntries int
}

// DefaultSimOptions returns the simulation's defaults.
func DefaultSimOptions() SimOptions {
	return SimOptions{Seed: 1, Entries: 600, LightEntries: 60}
}

// The simulations' time scales. Both use a fixed one-way delay T and hold
// the critical section for about 10T, so that throughput in entries per T
// compares. The multicast simulation's unit is the sub-tick: T is one, and
// the application acts on tick boundaries (simtest.SubTicks units), as
// timers do; the quorum simulation has no ticks.
const (
	multicastT = 1
	quorumT    = 10
	quorumHold = 10 * quorumT
	// lightGapTicks separates light-load entries by the arbiter's
	// HeartbeatTicks, so that no entry's release decision can ride on the
	// next entry's grant: it rides on the server's ping, as in an idle
	// group.
	lightGapTicks = 10
)

// simMulticast measures the rotating arbiter in simtest: n members, one
// resource, no loss.
func simMulticast(n int, load string, opt SimOptions) Row {
	row := Row{Layer: LayerSim, Mode: ModeMulticast, Protocol: RotatingArbiter, Transport: "simulated", N: n, Load: load}
	s := simtest.New(simtest.Options{Seed: opt.Seed, Hosts: n, MinDelay: multicastT, MaxDelay: multicastT,
		Tweak: func(c *arbiter.Config) { c.Params.MaxMembers = max(uint32(n), c.Params.MaxMembers) }})
	w := simtest.NewWorkload(s, 1)
	w.HoldMin, w.HoldMax = 1, 1
	w.ThinkMin, w.ThinkMax = 0, 0
	target := opt.Entries
	if load == Light {
		w.Serial, w.ThinkMin, w.ThinkMax, target = true, lightGapTicks, lightGapTicks, opt.LightEntries
	}
	// Everyone joins first, with the workload stopped; then a warm-up, so
	// that the measure starts with every node in its loop: at heavy load
	// the first requests all arrive at once, and the server records them
	// a turn's worth of decisions at a time.
	w.Stopped = true
	allJoined := func() bool {
		return !slices.ContainsFunc(s.Hosts, func(h *simtest.Host) bool { return !h.Node.Joined() })
	}
	if !w.RunUntil(s.Now+int64(n+200)*100*simtest.SubTicks, allJoined) {
		row.Err = "the members did not all join"
		return row
	}
	w.Stopped = false
	warm := s.Stats.Entries + n
	if load == Light {
		warm = s.Stats.Entries + 2
	}
	w.RunUntil(s.Now+int64(n+100)*100*simtest.SubTicks, func() bool { return s.Stats.Entries >= warm })
	sent, bytes := maps.Clone(s.Stats.Datagrams), maps.Clone(s.Stats.Bytes)
	entries0, waits0, syncs0, start := s.Stats.Entries, len(w.Waits), len(w.SyncDelays), s.Now
	limit := s.Now + int64(target)*int64(lightGapTicks+10)*simtest.SubTicks
	w.RunUntil(limit, func() bool { return s.Stats.Entries-entries0 >= target })
	if len(s.Check.Violations) > 0 {
		row.Err = s.Check.Violations[0]
		return row
	}
	row.Entries = s.Stats.Entries - entries0
	if row.Entries == 0 {
		row.Err = "no entries"
		return row
	}
	e := float64(row.Entries)
	for c, v := range s.Stats.Datagrams {
		per := float64(v-sent[c]) / e
		if c.Core() {
			row.Messages += per
		} else {
			row.Membership += per
		}
		if c == wire.ClassAck {
			row.Acks += per
		}
		row.Bytes += float64(s.Stats.Bytes[c]-bytes[c]) / e
	}
	row.Total = row.Messages + row.Membership
	row.LatencyP50T = float64(localgroup.Percentile(w.Waits[waits0:], 0.5)) / multicastT
	row.LatencyP99T = float64(localgroup.Percentile(w.Waits[waits0:], 0.99)) / multicastT
	row.PerT = e * multicastT / float64(s.Now-start)
	if load == Heavy {
		row.SyncDelayT = float64(localgroup.Percentile(w.SyncDelays[syncs0:], 0.5)) / multicastT
	}
	return row
}

// simQuorum measures a quorum protocol in its simulation (reliable FIFO
// links, fixed delay T).
func simQuorum(st Setup, n int, load string, opt SimOptions) Row {
	row := Row{Layer: LayerSim, Mode: ModeQuorum, Protocol: st.Protocol, Coterie: st.Coterie, Transport: "simulated", N: n, Load: load}
	f, err := protocols.NewFactory(st.quorum(n))
	if err != nil {
		row.Err = err.Error()
		return row
	}
	nodes, err := f.NewAll()
	if err != nil {
		row.Err = err.Error()
		return row
	}
	o := sim.Options{Seed: opt.Seed, Nodes: nodes, MinDelay: quorumT, MaxDelay: quorumT,
		MinHold: quorumHold, MaxHold: quorumHold, Size: frameSize}
	if load == Heavy {
		o.Entries = max(2, (opt.Entries+n-1)/n)
	} else {
		o.Serial, o.Entries = true, opt.LightEntries
	}
	r := sim.Run(o)
	if r.Err != nil {
		row.Err = r.Err.Error()
		return row
	}
	row.Entries, row.entriesBy = r.Entries, r.EntriesBy
	if r.Entries == 0 {
		row.Err = "no entries"
		return row
	}
	e := float64(r.Entries)
	row.Messages = float64(r.Messages) / e
	row.Total = row.Messages
	row.Bytes = float64(r.Bytes) / e
	row.LatencyP50T = float64(localgroup.Percentile(r.Waits, 0.5)) / quorumT
	row.LatencyP99T = float64(localgroup.Percentile(r.Waits, 0.99)) / quorumT
	row.PerT = e * quorumT / float64(max(r.End, 1))
	if load == Heavy {
		row.SyncDelayT = float64(localgroup.Percentile(r.SyncDelays, 0.5)) / quorumT
	}
	return row
}

// frameSize is a message's size on the TCP mesh, length prefix included,
// for a resource named like the bench's.
func frameSize(m q.Message) int {
	b, err := qnet.AppendFrame(nil, qnet.Frame{Resource: benchResource, Msg: m})
	if err != nil {
		panic(fmt.Sprintf("bench: a protocol made a message the mesh cannot send: %v", err))
	}
	return len(b)
}

// benchResource is the one resource every run contends for.
const benchResource = "bench"
