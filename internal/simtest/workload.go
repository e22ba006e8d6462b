package simtest

import (
	"fmt"
	"maps"
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
	// BurstRate is the probability per tick that a member with no burst
	// under way asks for BurstSize resources of their own at once (b0,
	// b1, ..., shared by every member's bursts), besides its one resource
	// of the workload, and releases each HoldMin..HoldMax ticks after its
	// grant: a script that locks many files. A burst fills the server's
	// turn (TurnLength decisions) at once, so turns end early and
	// unevenly, as a fixed think time never makes them.
	BurstRate float64
	BurstSize int
	// Bursts counts the bursts made, for the report.
	Bursts   int
	clients  map[int]*client
	bursts   map[int]*burst
	released map[string]int64 // when each resource was last released
	serialAt int64            // Serial: the tick the next request may be made
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

// burst is one member's burst under way: the requests not yet granted,
// and the resources held with when each is released.
type burst struct {
	inc       uint64
	asked     map[uint64]string // request -> resource
	releaseAt map[string]int64  // resource held -> tick of its release
}

func (b *burst) done() bool { return len(b.asked) == 0 && len(b.releaseAt) == 0 }

const (
	idle = iota
	waiting
	holding
)

// NewWorkload attaches a workload over n resources to every host.
func NewWorkload(s *Sim, resources int) *Workload {
	w := &Workload{s: s, HoldMin: 1, HoldMax: 3, ThinkMin: 0, ThinkMax: 10, clients: map[int]*client{}, bursts: map[int]*burst{}, released: map[string]int64{}}
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
		// A paused process's application is paused with it: it neither
		// asks nor releases until the process resumes, so a paused holder
		// holds on, as the group must assume.
		if !h.Alive || h.Paused || !h.Node.Joined() {
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
		w.burstStep(h, now)
	}
	if w.BurstRate > 0 && !w.Stopped && w.s.Rand.Float64() < w.BurstRate {
		w.startBurst()
	}
}

// burstStep releases what h's burst holds and is due; a burst of an
// earlier incarnation is gone with it.
func (w *Workload) burstStep(h *Host, now int64) {
	b := w.bursts[h.Index]
	if b == nil {
		return
	}
	if b.inc != h.Node.Inc() {
		delete(w.bursts, h.Index)
		return
	}
	for _, res := range slices.Sorted(maps.Keys(b.releaseAt)) {
		if now < b.releaseAt[res] {
			continue
		}
		delete(b.releaseAt, res)
		w.s.Check.Released(h, res)
		w.released[res] = w.s.Now
		if err := h.Node.Release(res); err != nil {
			w.s.Check.violate("h%d: Release(%q) after a grant in a burst: %v", h.Index, res, err)
		}
	}
	w.s.collect(h)
	if b.done() {
		delete(w.bursts, h.Index)
	}
}

// startBurst has a random running member with no burst under way ask for
// BurstSize resources at once.
func (w *Workload) startBurst() {
	var ready []*Host
	for _, h := range w.s.Hosts {
		if h.Alive && !h.Paused && h.Node.Joined() && w.bursts[h.Index] == nil {
			ready = append(ready, h)
		}
	}
	if len(ready) == 0 {
		return
	}
	h := ready[w.s.Rand.Intn(len(ready))]
	b := &burst{inc: h.Node.Inc(), asked: map[uint64]string{}, releaseAt: map[string]int64{}}
	for i := 0; i < w.BurstSize; i++ {
		res := fmt.Sprintf("b%d", i)
		req, err := h.Node.Acquire(res)
		if err != nil {
			continue
		}
		b.asked[req] = res
		w.s.Check.Acquired(h, req)
	}
	w.s.tracef("h%d bursts %d requests", h.Index, len(b.asked))
	w.Bursts++
	w.bursts[h.Index] = b
	w.s.collect(h)
}

// burstEvent applies an event of h's node to its burst, if it is one.
func (w *Workload) burstEvent(h *Host, e arbiter.Event) {
	b := w.bursts[h.Index]
	if b == nil || b.inc != h.Node.Inc() {
		return
	}
	switch e.Kind {
	case arbiter.EventGranted:
		if res, ok := b.asked[e.Req]; ok && res == e.Resource {
			delete(b.asked, e.Req)
			b.releaseAt[res] = w.s.Tick() + int64(w.between(w.HoldMin, w.HoldMax))
		}
	case arbiter.EventRefused:
		delete(b.asked, e.Req)
	case arbiter.EventLost:
		delete(b.releaseAt, e.Resource)
		for req, res := range b.asked {
			if res == e.Resource {
				delete(b.asked, req)
				w.s.Check.Cancelled(h, req)
			}
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
		if !h.Paused {
			ready = append(ready, h)
		}
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
	w.burstEvent(h, e)
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
	case arbiter.EventRefused:
		if c.state == waiting && e.Req == c.req {
			c.state, c.nextAt = idle, w.s.Tick()+1
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

// Faults injects what a LAN does to a group: crashes (each host restarts
// later as a new incarnation), leaves, paused processes (SIGSTOP, then
// SIGCONT, the pause caught between deciding and sending at times),
// partitions of every shape (two sides of any sizes, one host alone,
// one-way links: a host that cannot hear, or cannot be heard). Any host may
// be hit: with probability Aim the fault goes to a dangerous one, the
// server, its backup, a holder or the host with the newest log, else to any.
type Faults struct {
	s *Sim
	// Probabilities per tick.
	CrashRate, LeaveRate, PauseRate, PartitionRate float64
	Aim                                            float64
	// ObserversCrashRate is the probability per tick that every observer
	// crashes at once, holders and waiters among them: a host running
	// many scripts' locks dies. The group keeps its majority, however
	// many they are.
	ObserversCrashRate float64
	// GroupCuts adds the shapes of a link that fails one way between two
	// sets of hosts: any set that cannot hear the others or cannot be
	// heard by them, and every observer cut off from the voters one way (a
	// host running many scripts' locks whose link half fails), or, in a
	// group with no observer, the server and its backup cut off one way.
	GroupCuts                  bool
	RestartMin, RestartMax     int // ticks before a crashed or stopped host starts a new incarnation
	PauseMin, PauseMax         int // ticks a pause lasts
	PartitionMin, PartitionMax int // ticks a partition lasts
	MaxDown                    int // at most this many hosts crashed or paused at once
	restartAt                  map[int]int64
	resumeAt                   map[int]int64
	pausedFor                  map[int]int64 // ticks the current pause of a host lasts
	healAt                     int64
	// Counts of what was injected, for the report.
	Crashes, Leaves, Pauses, Partitions int
	ObserverCrashes                     int // hosts crashed by ObserversCrashRate
}

// NewFaults returns a fault injector for s; it does nothing until rates are
// set.
func NewFaults(s *Sim) *Faults {
	return &Faults{s: s, RestartMin: 20, RestartMax: 200, PauseMin: 10, PauseMax: 400, PartitionMin: 50, PartitionMax: 600,
		MaxDown: 1 << 30, restartAt: map[int]int64{}, resumeAt: map[int]int64{}, pausedFor: map[int]int64{}}
}

// Step injects this tick's faults, and restarts, resumes and heals what is
// due.
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
	for _, i := range sortedHosts(f.resumeAt) {
		if now >= f.resumeAt[i] {
			delete(f.resumeAt, i)
			s.Resume(i)
		}
	}
	if f.healAt != 0 && now >= f.healAt {
		f.healAt = 0
		s.Heal()
	}
	if f.ObserversCrashRate > 0 && s.Rand.Float64() < f.ObserversCrashRate {
		f.crashObservers()
	}
	crash := s.Rand.Float64() < f.CrashRate
	leave := s.Rand.Float64() < f.LeaveRate
	pause := s.Rand.Float64() < f.PauseRate
	split := s.Rand.Float64() < f.PartitionRate
	pick, aim := s.Rand.Int(), s.Rand.Float64() < f.Aim
	if split && f.healAt == 0 {
		f.partition(now)
	}
	if !crash && !leave && !pause {
		return
	}
	down := 0
	var candidates, dangerous []*Host
	danger := f.dangerous()
	for _, h := range s.Hosts {
		switch {
		case !h.Alive || h.Paused || h.Node.Stopped():
			down++
		case h.Node.HasState():
			candidates = append(candidates, h)
			if danger[h.Index] {
				dangerous = append(dangerous, h)
			}
		}
	}
	if aim && len(dangerous) > 0 {
		candidates = dangerous
	}
	if len(candidates) == 0 || down >= f.MaxDown {
		return
	}
	h := candidates[pick%len(candidates)]
	switch {
	case crash && f.mayCrash(h):
		f.Crashes++
		s.Crash(h.Index)
	case pause:
		f.Pauses++
		s.Pause(h.Index, pick%2 == 0)
		f.pausedFor[h.Index] = f.pauseLength(h, int64(f.PauseMin+s.Rand.Intn(f.PauseMax-f.PauseMin+1)))
		f.resumeAt[h.Index] = now + f.pausedFor[h.Index]
	case leave && h.Node.Joined() && f.mayCrash(h):
		// A leave that no majority records ends in the node giving up, as
		// good as a crash; the same guard applies.
		f.Leaves++
		s.tracef("h%d leaves", h.Index)
		_ = h.Node.Leave()
		s.collect(h)
	}
}

// pauseLength is how long h is paused, d ticks drawn. A pause long enough
// for the group to remove h ends with h coming back as a new member, so the
// members left must then keep a majority of the view without h; if they
// would not, the pause is cut short, below what could get h removed but,
// where that leaves room, past a takeover's timeout, so that a paused server
// still comes back to a new epoch. Seed 2033 of TestPropertySeeded paused
// one of three voters past its removal while another was leaving, which then
// gave up, and the last could never decide again. A pause the others cannot
// remove h for (in a group of two) does no such harm: h comes back as the
// member it was.
func (f *Faults) pauseLength(h *Host, d int64) int64 {
	cfg := f.s.baseConfig()
	p := cfg.Params
	// The group removes a member not heard for a lease and its margin. Its
	// silence is known as of the last SYNC, up to a turn and a ping timeout
	// ago, and it is heard again a heartbeat and a delivery after it
	// resumes.
	removable := int64(p.LeaseTicks+p.LeaseMarginTicks) - f.silence(h) -
		int64(cfg.TurnTicks+cfg.PingTimeoutTicks+cfg.HeartbeatTicks) - int64(f.s.Opt.MaxDelay/SubTicks+1)
	if d < removable || f.mayLose(h, true) {
		return d
	}
	if lo := int64(p.TakeoverTicks) + 1; removable > lo {
		return lo + d%(removable-lo)
	}
	return max(1, removable-1)
}

// silence is the longest h has gone unheard in any running host's view, as
// of its last SYNC.
func (f *Faults) silence(h *Host) int64 {
	var longest int64
	for _, x := range f.s.Hosts {
		if !x.Alive || !x.Node.HasState() {
			continue
		}
		for _, m := range x.Node.Members() {
			if m.ID == h.Node.ID() && m.Inc == h.Node.Inc() {
				longest = max(longest, int64(m.Silence))
			}
		}
	}
	return longest
}

// crashObservers crashes every running host that is an observer in its own
// view. Each still passes mayCrash, which counts no observer: the guard
// stays honest should an observer's view and the group's disagree.
func (f *Faults) crashObservers() {
	s := f.s
	for _, h := range s.Hosts {
		if h.Alive && !h.Paused && h.Node.HasState() && !h.Node.Stopped() && h.Node.Observer() && f.mayCrash(h) {
			f.ObserverCrashes++
			s.Crash(h.Index)
		}
	}
}

// mayCrash reports whether crashing h (or its leaving, which a cut-off
// group cannot record) leaves a majority of the group's view running, in the
// view of every running host: views differ when a leave or a join was
// decided on a branch of the log that a takeover later cut off. A crashed
// process comes back as a new member, so the members it was are gone for
// good until the group removes them, one per turn after a lease: a group
// that lost a majority at once can never decide again (nor admit anyone), as
// no majority-based protocol can without members that remember. Paused
// hosts come back; they count as running, unless the pause is long enough
// for the group to remove them (they then come back as new members).
func (f *Faults) mayCrash(h *Host) bool { return f.mayLose(h, false) }

// mayLose is mayCrash; with removed, it asks instead whether the others
// keep a majority of the view once the group has removed h.
func (f *Faults) mayLose(h *Host, removed bool) bool {
	s := f.s
	lease := s.Config(0, false).Params.LeaseTicks
	running := func(m arbiter.MemberInfo) bool {
		// A member cut off, or silent for a while, may be removed any
		// moment: it does not count.
		if m.Silence >= lease/2 {
			return false
		}
		for _, x := range s.Hosts {
			if x != h && x.Alive && x.Node.HasState() && !x.Node.Stopped() && !x.Node.Leaving() && x.Node.ID() == m.ID && x.Node.Inc() == m.Inc && !s.cutOff(x.Index) {
				return !x.Paused || f.pausedFor[x.Index] < int64(lease/2)
			}
		}
		return false
	}
	for _, x := range s.Hosts {
		if !x.Alive || !x.Node.HasState() || x.Node.Stopped() {
			continue
		}
		view := x.Node.Members()
		k, voters, observers, transient := 0, 0, 0, 0
		for _, m := range view {
			if removed && m.ID == h.Node.ID() && m.Inc == h.Node.Inc() {
				continue
			}
			if m.Observer {
				observers++
				continue // counts for no majority, alive or dead
			}
			voters++
			if running(m) {
				k++
				if m.Transient {
					transient++
				}
			}
		}
		// A change of the voters may be under way, as an admission may
		// (below): a promotion while the view has MinVoters voters or
		// fewer adds one, which may be the next to die (seed 29040: a
		// leaving voter and the observer promoted for it crashed in one
		// tick, two of four); a demotion while it has more takes a running
		// transient voter from the count.
		switch {
		case voters <= arbiter.MinVoters && observers > 0:
			voters++
		case voters > arbiter.MinVoters && transient > 0:
			k--
			voters--
		}
		// A live host outside the view may be admitted any moment (a join
		// request in flight, perhaps of an incarnation it has since given
		// up, stopped, which then never answers): count it in the view,
		// not running. Seed 4693: a crash in a view of 7 with 4 running,
		// then such an admission, left 4 of 8.
		// One that asks to be an observer is admitted as a voter only
		// while the group has fewer than MinVoters.
		outside := 0
		for _, y := range s.Hosts {
			if y != h && y.Alive && !slices.ContainsFunc(view, func(m arbiter.MemberInfo) bool {
				return m.ID == y.Node.ID() && m.Inc == y.Node.Inc()
			}) && (voters < arbiter.MinVoters || !s.asksObserver(y.Index)) {
				outside++
			}
		}
		if 2*k <= voters+outside {
			return false
		}
	}
	return true
}

// dangerous returns the hosts whose failure the protocol must survive at
// the worst moment: every host acting as server, the backup each names,
// every holder, and the host with the newest log.
func (f *Faults) dangerous() map[int]bool {
	s := f.s
	out := map[int]bool{}
	byID := map[wire.NodeID]int{}
	var top *Host
	for _, h := range s.Hosts {
		if !h.Alive || !h.Node.HasState() || h.Node.Stopped() {
			continue
		}
		byID[h.Node.ID()] = h.Index
		if top == nil || h.Node.Epoch() > top.Node.Epoch() || (h.Node.Epoch() == top.Node.Epoch() && h.Node.T() > top.Node.T()) {
			top = h
		}
		if len(h.Node.Held()) > 0 {
			out[h.Index] = true
		}
	}
	if top != nil {
		out[top.Index] = true
	}
	for _, h := range s.Hosts {
		if h.Alive && h.Node.HasState() && h.Node.IsServer() {
			out[h.Index] = true
			if i, ok := byID[h.Node.Backup()]; ok {
				out[i] = true
			}
		}
	}
	return out
}

// partition cuts the network for a while, in one of the shapes a LAN
// breaks into: two sides (the server's side the smaller one half the time),
// one host alone, or a host that cannot hear or cannot be heard.
func (f *Faults) partition(now int64) {
	s := f.s
	n := len(s.Hosts)
	if n < 2 {
		return
	}
	f.Partitions++
	f.healAt = now + int64(f.PartitionMin+s.Rand.Intn(f.PartitionMax-f.PartitionMin+1))
	order := s.Rand.Perm(n)
	shapes := 4
	if f.GroupCuts {
		shapes = 7
	}
	switch shape := s.Rand.Intn(shapes); shape {
	case 0: // two sides of any sizes
		k := 1 + s.Rand.Intn(n-1)
		s.Partition(order[:k], order[k:])
	case 1: // two sides, the server on the smaller one (alone, if two hosts)
		srv := -1
		for _, h := range s.Hosts {
			if h.Alive && h.Node.HasState() && h.Node.IsServer() {
				srv = h.Index
			}
		}
		if srv < 0 {
			srv = order[0]
		}
		others := slices.DeleteFunc(order, func(i int) bool { return i == srv })
		k := s.Rand.Intn((n-1)/2 + 1) // others beside the server: k+1 <= n-k-1 unless n is 2
		if 2*(k+1) >= n && k > 0 {
			k--
		}
		s.Partition(append([]int{srv}, others[:k]...), others[k:])
	case 2, 3: // one host cannot hear anyone, or cannot be heard
		f.cutOneWay(order[:1], order[1:], shape == 2)
	case 4, 5: // a set of hosts cannot be heard by the others, or cannot hear them
		k := 1 + s.Rand.Intn(n-1)
		f.cutOneWay(order[:k], order[k:], shape == 5)
	case 6: // every observer cut off from the voters, one way
		var obs, voters []int
		for _, h := range s.Hosts {
			if h.Alive && h.Node.HasState() && h.Node.Observer() {
				obs = append(obs, h.Index)
			} else {
				voters = append(voters, h.Index)
			}
		}
		if len(obs) == 0 {
			// No observer to cut off (this shape did nothing here once):
			// cut the two hosts that hold every decision, the server and
			// its backup, one way from the rest instead. Deaf, the pair
			// is still heard and so stops takeovers while it loses its
			// authority; mute, the others take over while it still hears
			// them.
			obs, voters = f.serverPair(order)
		}
		f.cutOneWay(obs, voters, s.Rand.Intn(2) == 0)
	}
}

// serverPair splits the hosts, in the given order, into the server's and
// its backup's, and the others: the acting server with the highest epoch,
// or, if none acts, the first host. In a group of the two alone, the server
// is cut off from its backup.
func (f *Faults) serverPair(order []int) (pair, others []int) {
	s := f.s
	var srv *Host
	for _, h := range s.Hosts {
		if h.Alive && h.Node.HasState() && h.Node.IsServer() && (srv == nil || h.Node.Epoch() > srv.Node.Epoch()) {
			srv = h
		}
	}
	if srv == nil {
		srv = s.Hosts[order[0]]
	}
	backup := -1
	if srv.Node.HasState() {
		for _, h := range s.Hosts {
			if h != srv && h.Alive && h.Node.HasState() && !h.Node.Stopped() && h.Node.ID() == srv.Node.Backup() {
				backup = h.Index
			}
		}
	}
	pair = []int{srv.Index}
	for _, i := range order {
		if i == backup {
			pair = append(pair, i)
		} else if i != srv.Index {
			others = append(others, i)
		}
	}
	if len(others) == 0 {
		return pair[:1], pair[1:]
	}
	return pair, others
}

// cutOneWay cuts every link from the hosts of a to those of b, or with deaf
// from b to a.
func (f *Faults) cutOneWay(a, b []int, deaf bool) {
	if deaf {
		a, b = b, a
	}
	for _, i := range a {
		for _, j := range b {
			f.s.Cut(i, j)
		}
	}
}

// HealAll ends every fault: it heals the network, resumes paused hosts and
// starts a new incarnation in every host that is down.
func (f *Faults) HealAll() {
	s := f.s
	s.Heal()
	f.healAt = 0
	for _, h := range s.Hosts {
		if h.Alive && h.Paused {
			s.Resume(h.Index)
		}
	}
	f.resumeAt = map[int]int64{}
	for _, h := range s.Hosts {
		if !h.Alive || h.Node.Stopped() {
			s.Start(h.Index, false)
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
