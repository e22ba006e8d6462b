package simtest

import (
	"fmt"
	"slices"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/wire"
)

// Workload drives every member as an application would: think, acquire a
// random resource, hold it, release it, again. With ThinkMax 0 every node
// always waits (heavy load).
type Workload struct {
	s         *Sim
	Resources []string
	ThinkMin  int // ticks idle between critical sections
	ThinkMax  int
	HoldMin   int // ticks in the critical section
	HoldMax   int
	// Stopped stops new requests; outstanding ones still complete.
	Stopped bool
	// Serial is light load: one request at a time in the whole group, made
	// by a random member once the previous holder has released and
	// ThinkMin..ThinkMax ticks have passed.
	Serial bool
	// Waits has, for each grant, the time from Acquire to the grant, and
	// SyncDelays, for each grant whose request was made before the previous
	// holder of the resource released it, the time from that release to
	// the grant; both in sub-ticks.
	Waits, SyncDelays []int64
	clients           map[int]*client
	released          map[string]int64 // when each resource was last released
	serialAt          int64            // Serial: the tick the next request may be made
}

type client struct {
	inc       uint64
	state     int // idle, waiting, holding
	resource  string
	req       uint64
	askedAt   int64 // sub-tick of the Acquire
	nextAt    int64
	releaseAt int64
}

const (
	idle = iota
	waiting
	holding
)

// NewWorkload attaches a workload over n resources to every host.
func NewWorkload(s *Sim, resources int) *Workload {
	w := &Workload{s: s, HoldMin: 1, HoldMax: 3, ThinkMin: 0, ThinkMax: 10, clients: map[int]*client{}, released: map[string]int64{}}
	for i := 0; i < resources; i++ {
		w.Resources = append(w.Resources, fmt.Sprintf("r%d", i))
	}
	for _, h := range s.Hosts {
		h.OnEvent = w.onEvent
	}
	return w
}

func (w *Workload) client(h *Host) *client {
	c := w.clients[h.Index]
	if c == nil || c.inc != h.Node.Inc() {
		c = &client{inc: h.Node.Inc(), nextAt: w.s.Tick() + int64(w.between(w.ThinkMin, w.ThinkMax))}
		w.clients[h.Index] = c
	}
	return c
}

func (w *Workload) between(lo, hi int) int {
	if hi <= lo {
		return lo
	}
	return lo + w.s.Rand.Intn(hi-lo+1)
}

// Step runs every live member's application for the current tick.
func (w *Workload) Step() {
	now := w.s.Tick()
	if w.Serial {
		w.serialStep(now)
	}
	for _, h := range w.s.Hosts {
		if !h.Alive || !h.Node.Joined() {
			continue
		}
		c := w.client(h)
		switch {
		case c.state == idle && !w.Stopped && !w.Serial && now >= c.nextAt:
			res := w.Resources[w.s.Rand.Intn(len(w.Resources))]
			req, err := h.Node.Acquire(res)
			if err != nil {
				c.nextAt = now + 1
				continue
			}
			w.acquired(h, c, res, req)
		case c.state == holding && now >= c.releaseAt:
			w.s.Check.Released(h, c.resource)
			w.released[c.resource] = w.s.Now
			if err := h.Node.Release(c.resource); err != nil {
				w.s.Check.violate("h%d: Release(%q) after a grant: %v", h.Index, c.resource, err)
			}
			c.state, c.nextAt = idle, now+int64(w.between(w.ThinkMin, w.ThinkMax))
			w.serialAt = c.nextAt
			w.s.collect(h)
		}
	}
}

func (w *Workload) acquired(h *Host, c *client, res string, req uint64) {
	c.state, c.resource, c.req, c.askedAt = waiting, res, req, w.s.Now
	w.s.Check.Acquired(h, req)
	w.s.collect(h)
}

// serialStep makes the next request of a light load: only when no member
// waits or holds, and the think time since the last release has passed.
func (w *Workload) serialStep(now int64) {
	if w.Stopped || now < w.serialAt {
		return
	}
	var ready []*Host
	for _, h := range w.s.Hosts {
		if !h.Alive || !h.Node.Joined() {
			continue
		}
		if c := w.client(h); c.state != idle {
			return
		}
		ready = append(ready, h)
	}
	if len(ready) == 0 {
		return
	}
	h := ready[w.s.Rand.Intn(len(ready))]
	res := w.Resources[w.s.Rand.Intn(len(w.Resources))]
	req, err := h.Node.Acquire(res)
	if err != nil {
		w.serialAt = now + 1
		return
	}
	w.acquired(h, w.client(h), res, req)
}

func (w *Workload) onEvent(h *Host, e arbiter.Event) {
	c := w.client(h)
	switch e.Kind {
	case arbiter.EventGranted:
		if c.state == waiting && e.Req == c.req {
			c.state, c.releaseAt = holding, w.s.Tick()+int64(w.between(w.HoldMin, w.HoldMax))
			w.Waits = append(w.Waits, w.s.Now-c.askedAt)
			if at, ok := w.released[c.resource]; ok && c.askedAt <= at {
				w.SyncDelays = append(w.SyncDelays, w.s.Now-at)
			}
		}
	case arbiter.EventLost:
		if e.Resource == c.resource && (c.state == holding || c.state == waiting) {
			if c.state == waiting {
				w.s.Check.Cancelled(h, c.req)
			}
			c.state, c.nextAt = idle, w.s.Tick()+1
		}
	}
}

// Run runs the simulation with the workload for n ticks.
func (w *Workload) Run(n int) { w.RunUntil(w.s.Now+int64(n)*SubTicks, nil) }

// RunUntil runs the simulation with the workload until end or cond.
func (w *Workload) RunUntil(end int64, cond func() bool) bool {
	return w.s.RunUntil(end, func() bool {
		w.Step()
		return cond != nil && cond()
	})
}

// Faults crashes, stops and restarts nodes at random, never the server or
// the member it is handing its turn to (the runtime's server takeover is a
// separate feature; these tests cover crashes of every other member).
type Faults struct {
	s          *Sim
	CrashRate  float64 // probability per tick that a member crashes
	LeaveRate  float64 // probability per tick that a member leaves
	RestartMin int     // ticks before a stopped host starts a new incarnation
	RestartMax int
	MaxDown    int // at most this many hosts down at once
	restartAt  map[int]int64
}

// NewFaults returns a fault injector for s; it does nothing until rates are
// set.
func NewFaults(s *Sim) *Faults {
	return &Faults{s: s, RestartMin: 20, RestartMax: 200, MaxDown: 1 << 30, restartAt: map[int]int64{}}
}

// Step injects this tick's faults and restarts hosts whose time has come.
func (f *Faults) Step() {
	s, now := f.s, f.s.Tick()
	for _, h := range s.Hosts {
		if !h.Alive || h.Node.Stopped() {
			if _, ok := f.restartAt[h.Index]; !ok {
				f.restartAt[h.Index] = now + int64(f.RestartMin+s.Rand.Intn(f.RestartMax-f.RestartMin+1))
			}
		}
	}
	for _, i := range sortedHosts(f.restartAt) {
		if now >= f.restartAt[i] {
			delete(f.restartAt, i)
			s.Start(i, false)
		}
	}
	crash := s.Rand.Float64() < f.CrashRate
	leave := s.Rand.Float64() < f.LeaveRate
	pick := s.Rand.Int()
	if !crash && !leave {
		return
	}
	down := 0
	var candidates []*Host
	protected := s.Protected()
	for _, h := range s.Hosts {
		switch {
		case !h.Alive || h.Node.Stopped():
			down++
		case h.Node.Joined() && !protected[h.Index]:
			candidates = append(candidates, h)
		}
	}
	if len(candidates) == 0 || down >= f.MaxDown {
		return
	}
	h := candidates[pick%len(candidates)]
	if crash {
		s.Crash(h.Index)
		return
	}
	s.tracef("h%d leaves", h.Index)
	_ = h.Node.Leave()
	s.collect(h)
}

// RestartAll starts a new incarnation in every host that is down.
func (f *Faults) RestartAll() {
	for _, h := range f.s.Hosts {
		if !h.Alive || h.Node.Stopped() {
			f.s.Start(h.Index, false)
		}
	}
	f.restartAt = map[int]int64{}
}

func sortedHosts(m map[int]int64) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Protected returns the hosts a fault must spare: the host with the most
// advanced log and the server at its T, every acting server, the member each
// would hand over to, and any member a SYNC is on its way to. Crashing any of
// these is a server failure, which this protocol core does not take over
// from.
func (s *Sim) Protected() map[int]bool {
	out := map[int]bool{}
	byID := map[wire.NodeID]int{}
	var maxT uint64
	var top *Host
	for _, h := range s.Hosts {
		if !h.Alive || !h.Node.HasState() || h.Node.Stopped() {
			continue
		}
		byID[h.Node.ID()] = h.Index
		if top == nil || h.Node.T() > maxT {
			top, maxT = h, h.Node.T()
		}
	}
	protect := func(id wire.NodeID, ok bool) {
		if i, known := byID[id]; ok && known {
			out[i] = true
		}
	}
	if top != nil {
		// The holder of the newest decisions (perhaps their only holder,
		// until it has retransmitted them), and the server they point to.
		out[top.Index] = true
		protect(top.Node.Server())
	}
	for _, h := range s.Hosts {
		if !h.Alive || !h.Node.HasState() || h.Node.Stopped() {
			continue
		}
		if h.Node.IsServer() {
			out[h.Index] = true
			// Its successor, and every member between the two in ID order:
			// a ping reply of theirs may be in flight and make them the
			// successor.
			next, _ := h.Node.NextServer()
			members := h.Node.Members()
			i := slices.IndexFunc(members, func(m arbiter.MemberInfo) bool { return m.ID == h.Node.ID() })
			for k := 1; k <= len(members) && i >= 0; k++ {
				id := members[(i+k)%len(members)].ID
				protect(id, true)
				if id == next {
					break
				}
			}
		}
		protect(h.Node.HandoffTarget())
	}
	return out
}
