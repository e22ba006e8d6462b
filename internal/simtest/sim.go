// Package simtest runs arbiter state machines over a deterministic, seeded,
// in-memory network: virtual time, per-datagram delay, loss, duplication and
// reordering, crashes and restarts, partitions of any shape (one-way links
// included), paused processes and clocks that run at different rates. It
// checks the protocol's properties after every delivery (mutual exclusion
// against one monotonic clock, agreement of the decision log, FIFO grant
// order against a reference model, at most one server with a majority's
// authority) and counts every datagram by class.
//
// Every source of randomness is one math/rand generator seeded from
// Options.Seed, and nothing depends on map order or wall time, so a seed
// replays exactly: the same seed gives the same trace hash.
package simtest

import (
	"container/heap"
	"fmt"
	"hash"
	"hash/fnv"
	"math/rand"
	"slices"
	"strings"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/wire"
)

// SubTicks is the number of virtual time units in one tick. Delays are drawn
// in these units, so that datagrams overtake each other within a tick.
const SubTicks = 10

// fine is how many units of a host's clock make one virtual unit: a host
// whose clock runs fast or slow ticks at instants between the units.
const fine = 1000

// Options configures a simulation.
type Options struct {
	Seed  int64
	Hosts int // host 0 founds the group; the others join at start
	// Loss and Dup are the probabilities that one copy of a datagram (one
	// receiver's) is lost, or delivered twice.
	Loss, Dup float64
	// MinDelay and MaxDelay bound the one-way delay in sub-ticks (default 1
	// and SubTicks). Independent delays reorder datagrams.
	MinDelay, MaxDelay int
	// DriftPPM, if set, gives every host a clock rate drawn from
	// [-DriftPPM, +DriftPPM] parts per million off real (virtual) time.
	DriftPPM int
	// Tweak adjusts every node's configuration.
	Tweak func(*arbiter.Config)
	// Observers is how many hosts, the last ones, ask to join as observers
	// (arbiter.Config.Observer); the group admits them as voters while it
	// has fewer than arbiter.MinVoters.
	Observers int
	// Drop, if set, decides the fate of each copy before Loss does: scenario
	// tests drop exactly the datagram the paper's story loses.
	Drop func(d *Datagram) bool
	// Delivered, if set, sees every copy as it reaches a live host, before
	// the host steps it.
	Delivered func(d *Datagram)
	// Trace, if set, receives a line for every delivery and event.
	Trace func(string)
	// Elsewhere, if set, sees every datagram a host sends to an address no
	// host has (a rogue sender's, in tests that forge datagrams).
	Elsewhere func(from int, addr string, p *wire.Packet)
	// ReadAll delivers every multicast to every host. By default a host
	// drops, as the runtime's socket filter does, the multicasts addressed
	// to other members (wire.Recipients).
	ReadAll bool
}

// Datagram is one copy of a datagram on its way to one host.
type Datagram struct {
	From, To  int
	Multicast bool
	Sent      int64
	Data      []byte
	Packet    wire.Packet // decoded at send time, for hooks and accounting
}

// Has reports whether the datagram carries a message of kind k.
func (d *Datagram) Has(k wire.Kind) bool {
	return slices.ContainsFunc(d.Packet.Messages, func(m wire.Message) bool { return m.Kind() == k })
}

// Host is one machine slot: it runs one node at a time; a restart puts a new
// incarnation in the same slot, at the same address.
type Host struct {
	Index int
	Addr  string
	Node  *arbiter.Node
	Alive bool
	// Paused is a stopped process (SIGSTOP): it neither ticks nor reads, and
	// what reaches it waits in its socket buffer until it resumes.
	Paused bool
	// RatePPM is how fast this host's clock runs, in parts per million off
	// virtual time.
	RatePPM int
	// Events received from the current node, in order.
	Events []arbiter.Event
	// OnEvent, if set, is called for each event after the checks.
	OnEvent func(h *Host, e arbiter.Event)

	period   int64 // one tick of this host's clock, in fine units
	nextTick int64 // fine units
	inbox    []*Datagram
	lastSent []*delivery // what it sent at lastAt: a pause may catch it before the send
	lastAt   int64
}

// inboxLimit is the socket buffer of a paused host, in datagrams: the rest
// is dropped, as the kernel drops what overflows a socket.
const inboxLimit = 2048

// Sim is one simulation run.
type Sim struct {
	Opt   Options
	Rand  *rand.Rand
	Now   int64 // virtual time in sub-ticks
	Hosts []*Host
	Stats Stats
	Check *Checker

	codec   *wire.Codec
	queue   deliveries
	seq     uint64
	trace   hash.Hash64
	blocked map[[2]int]bool // from, to: the link is cut
}

// Stats counts what went over the simulated network.
type Stats struct {
	Datagrams map[wire.Class]int // datagrams sent (a multicast counts once)
	Bytes     map[wire.Class]int
	Messages  map[wire.Kind]int
	Delivered int // datagram copies delivered
	Lost      int
	Cut       int // copies dropped by a partition
	Filtered  int // multicast copies addressed to other members, dropped on arrival
	Entries   int // grants reported to the application
	Refused   int // requests refused for want of room in the lock table
}

// New builds a simulation: host 0 founds the group and the others join.
func New(opt Options) *Sim {
	if opt.MaxDelay == 0 {
		opt.MinDelay, opt.MaxDelay = 1, SubTicks
	}
	c, err := wire.NewCodec(wire.DefaultLimits())
	if err != nil {
		panic(err)
	}
	s := &Sim{
		Opt:     opt,
		Rand:    rand.New(rand.NewSource(opt.Seed)),
		codec:   c,
		trace:   fnv.New64a(),
		blocked: map[[2]int]bool{},
		Stats:   Stats{Datagrams: map[wire.Class]int{}, Bytes: map[wire.Class]int{}, Messages: map[wire.Kind]int{}},
	}
	s.Check = newChecker(s)
	for i := 0; i < opt.Hosts; i++ {
		h := &Host{Index: i, Addr: fmt.Sprintf("h%d", i)}
		if opt.DriftPPM > 0 {
			h.RatePPM = s.Rand.Intn(2*opt.DriftPPM+1) - opt.DriftPPM
		}
		// A tick of a clock running RatePPM fast is that much shorter.
		h.period = int64(SubTicks*fine) * 1_000_000 / int64(1_000_000+h.RatePPM)
		h.nextTick = h.period
		s.Hosts = append(s.Hosts, h)
	}
	for i := range s.Hosts {
		s.Start(i, i == 0)
	}
	return s
}

// baseConfig is the configuration every node shares, the tests' Tweak
// applied, without drawing an incarnation: for timings, it leaves the run's
// random draws as they are.
func (s *Sim) baseConfig() arbiter.Config {
	cfg := arbiter.DefaultConfig()
	if s.Opt.Tweak != nil {
		s.Opt.Tweak(&cfg)
	}
	return cfg
}

// Config returns the configuration a node in host i gets.
func (s *Sim) Config(i int, bootstrap bool) arbiter.Config {
	cfg := arbiter.DefaultConfig()
	cfg.Group = wire.GroupID("sim")
	cfg.Inc = s.Rand.Uint64() | 1
	cfg.Addr = s.Hosts[i].Addr
	cfg.Bootstrap = bootstrap
	cfg.Observer = s.asksObserver(i)
	// The simulated network carries the group's datagrams alone, as a
	// group key would make a real one; tests that forge datagrams say
	// otherwise by a Tweak.
	cfg.Authenticated = true
	if s.Opt.Tweak != nil {
		s.Opt.Tweak(&cfg)
	}
	return cfg
}

// asksObserver reports whether host i asks to join as an observer.
func (s *Sim) asksObserver(i int) bool { return i >= len(s.Hosts)-s.Opt.Observers }

// Start runs a new incarnation in host i (a fresh process: it joins, or with
// bootstrap founds the group).
func (s *Sim) Start(i int, bootstrap bool) {
	n, err := arbiter.New(s.Config(i, bootstrap))
	if err != nil {
		panic(err)
	}
	h := s.Hosts[i]
	h.Node, h.Alive, h.Paused, h.Events, h.inbox = n, true, false, nil, nil
	h.nextTick = s.Now*fine + h.period
	s.collect(h)
}

// Crash stops host i's process at once: it sends and receives nothing more.
func (s *Sim) Crash(i int) {
	h := s.Hosts[i]
	if !h.Alive {
		return
	}
	if !h.Paused {
		s.Check.stopped(h)
	}
	s.Check.crashed(h)
	h.Alive, h.Paused, h.inbox = false, false, nil
	s.tracef("crash h%d (node %d)", i, h.Node.ID())
}

// Pause stops host i's process (SIGSTOP). With catchSends, what it sent in
// its last step that has not left yet is held back until it resumes, as if
// the stop came between deciding and the system call that sends.
func (s *Sim) Pause(i int, catchSends bool) {
	h := s.Hosts[i]
	if !h.Alive || h.Paused {
		return
	}
	s.Check.stopped(h)
	h.Paused = true
	if catchSends && h.lastAt == s.Now {
		for _, d := range h.lastSent {
			d.held = true
		}
	}
	s.tracef("pause h%d (node %d)", i, h.Node.ID())
}

// Resume continues a paused host (SIGCONT): its clock ran on, so it first
// moves its time over the ticks it missed at once, as the runtime catches
// up, then sends what the pause held back and reads what waited in its
// socket.
func (s *Sim) Resume(i int) {
	h := s.Hosts[i]
	if !h.Alive || !h.Paused {
		return
	}
	h.Paused = false
	s.tracef("resume h%d (node %d)", i, h.Node.ID())
	var missed uint64
	for h.nextTick <= s.Now*fine {
		missed++
		h.nextTick += h.period
	}
	h.Node.TickBy(missed)
	s.collect(h)
	for _, d := range h.lastSent {
		if d.held {
			d.held = false
			s.schedule(d.dgram, 1)
		}
	}
	h.lastSent = nil
	inbox := h.inbox
	h.inbox = nil
	for _, d := range inbox {
		s.deliver(d)
	}
	s.Check.resumed(h)
}

// Partition cuts every link between hosts of different groups, both ways;
// hosts in no group keep their links to everyone. Links already cut stay
// cut.
func (s *Sim) Partition(groups ...[]int) {
	side := map[int]int{}
	for g, hosts := range groups {
		for _, i := range hosts {
			side[i] = g + 1
		}
	}
	for a := range s.Hosts {
		for b := range s.Hosts {
			if side[a] != 0 && side[b] != 0 && side[a] != side[b] {
				s.blocked[[2]int{a, b}] = true
			}
		}
	}
	s.tracef("partition %v", groups)
}

// Cut cuts the link from one host to another, one way only.
func (s *Sim) Cut(from, to int) {
	s.blocked[[2]int{from, to}] = true
	s.tracef("cut h%d→h%d", from, to)
}

// Heal restores every link.
func (s *Sim) Heal() {
	if len(s.blocked) > 0 {
		s.tracef("heal")
	}
	clear(s.blocked)
}

// cutOff reports whether any link to or from host i is cut.
func (s *Sim) cutOff(i int) bool {
	for l := range s.blocked {
		if l[0] == i || l[1] == i {
			return true
		}
	}
	return false
}

// Linked reports whether a datagram from one host reaches another.
func (s *Sim) Linked(from, to int) bool { return !s.blocked[[2]int{from, to}] }

// RunTicks advances virtual time by n ticks, delivering datagrams and
// ticking every live node once per tick of its own clock.
func (s *Sim) RunTicks(n int) { s.RunUntil(s.Now+int64(n)*SubTicks, nil) }

// RunUntil runs until virtual time end, or until cond (checked at every tick
// of virtual time) holds; it reports whether cond held.
func (s *Sim) RunUntil(end int64, cond func() bool) bool {
	for s.Now < end {
		boundary := s.Now + SubTicks - s.Now%SubTicks
		for {
			// The next event before the boundary: a delivery, or a tick of
			// some host's clock (at the boundary itself, after the
			// deliveries, in host order, as clocks that agree tick).
			var host *Host
			for _, h := range s.Hosts {
				if h.Alive && !h.Paused && h.nextTick <= boundary*fine && (host == nil || h.nextTick < host.nextTick) {
					host = h
				}
			}
			if s.queue.Len() > 0 && s.queue[0].at < boundary && (host == nil || s.queue[0].at*fine < host.nextTick) {
				d := heap.Pop(&s.queue).(*delivery)
				if d.held {
					continue // caught by a pause: it leaves when the sender resumes
				}
				s.Now = d.at
				s.deliver(d.dgram)
				continue
			}
			if host == nil {
				break
			}
			s.Now = host.nextTick / fine
			host.nextTick += host.period
			host.Node.Tick()
			s.collect(host)
		}
		s.Now = boundary
		s.Check.oneServer()
		if s.Tick()%stateCheckTicks == 0 {
			s.Check.statesSendable()
		}
		if cond != nil && cond() {
			return true
		}
	}
	return cond == nil
}

// Flush sends what host h's node produced outside a step of the simulation
// (an Acquire or Release the test called) and runs its events through the
// checks.
func (s *Sim) Flush(h *Host) { s.collect(h) }

// Tick returns the current virtual time in ticks.
func (s *Sim) Tick() int64 { return s.Now / SubTicks }

// TraceHash is a hash of every delivery and event so far: equal for equal
// seeds.
func (s *Sim) TraceHash() uint64 { return s.trace.Sum64() }

func (s *Sim) deliver(d *Datagram) {
	h := s.Hosts[d.To]
	if !h.Alive {
		return
	}
	if d.Multicast && !s.Opt.ReadAll && wire.AddressedElsewhere(d.Data, h.Node.ID()) {
		s.Stats.Filtered++ // by the socket filter, before it is queued
		return
	}
	if h.Paused {
		if len(h.inbox) < inboxLimit {
			h.inbox = append(h.inbox, d)
		}
		return
	}
	s.Stats.Delivered++
	if s.Opt.Delivered != nil {
		s.Opt.Delivered(d)
	}
	s.trace.Write(d.Data)
	fmt.Fprintf(s.trace, "@%d>%d", s.Now, d.To)
	p, err := s.codec.Decode(d.Data)
	if err != nil {
		panic(fmt.Sprintf("simtest: a node sent an undecodable datagram: %v", err))
	}
	for _, m := range p.Messages {
		if s.Opt.Trace != nil {
			s.tracef("h%d→h%d %s %s", d.From, d.To, m.Kind(), brief(m))
		}
		_ = h.Node.Step(s.Hosts[d.From].Addr, p.Header, m)
		s.collect(h)
	}
	s.Check.afterDelivery(h)
}

// collect takes a node's Ready: datagrams go on the network (recorded in the
// checker first), events go through the checks.
func (s *Sim) collect(h *Host) {
	if !h.Node.HasReady() {
		return
	}
	rd := h.Node.Ready()
	h.Node.Advance()
	if h.lastAt != s.Now {
		h.lastSent, h.lastAt = nil, s.Now
	}
	// Consecutive messages to the same destination share datagrams, as the
	// runtime sends them.
	for i := 0; i < len(rd.Messages); {
		j := i + 1
		for j < len(rd.Messages) && rd.Messages[j].Addr == rd.Messages[i].Addr && rd.Messages[j].For == rd.Messages[i].For {
			j++
		}
		msgs := make([]wire.Message, 0, j-i)
		for _, o := range rd.Messages[i:j] {
			msgs = append(msgs, o.Msg)
		}
		hdr := rd.Header
		hdr.For = rd.Messages[i].For
		s.send(h, hdr, rd.Messages[i].Addr, msgs)
		i = j
	}
	for _, e := range rd.Events {
		h.Events = append(h.Events, e)
		fmt.Fprintf(s.trace, "e%d:%d:%s:%d", h.Index, e.Kind, e.Resource, e.Token)
		if s.Opt.Trace != nil {
			s.tracef("h%d event %s node=%d res=%q token=%d epoch=%d %s", h.Index, e.Kind, e.Node, e.Resource, e.Token, e.Epoch, e.Reason)
		}
		s.Check.event(h, e)
		if h.OnEvent != nil {
			h.OnEvent(h, e)
		}
	}
}

func (s *Sim) send(h *Host, hdr wire.Header, addr string, msgs []wire.Message) {
	dgrams, err := s.codec.Pack(hdr, msgs)
	if err != nil {
		panic(fmt.Sprintf("simtest: host %d produced an unsendable batch: %v", h.Index, err))
	}
	for _, data := range dgrams {
		p, err := s.codec.Decode(data)
		if err != nil {
			panic(err)
		}
		class := wire.Classify(&p, addr == "")
		s.Stats.Datagrams[class]++
		s.Stats.Bytes[class] += len(data)
		for _, m := range p.Messages {
			s.Stats.Messages[m.Kind()]++
		}
		s.Check.sent(h, &p)
		if addr == "" {
			for _, to := range s.Hosts {
				if to != h {
					s.transmit(h, &Datagram{From: h.Index, To: to.Index, Multicast: true, Sent: s.Now, Data: data, Packet: p})
				}
			}
		} else if to := s.hostByAddr(addr); to != nil {
			s.transmit(h, &Datagram{From: h.Index, To: to.Index, Sent: s.Now, Data: data, Packet: p})
		} else if s.Opt.Elsewhere != nil {
			s.Opt.Elsewhere(h.Index, addr, &p)
		}
	}
}

func (s *Sim) hostByAddr(addr string) *Host {
	for _, h := range s.Hosts {
		if h.Addr == addr {
			return h
		}
	}
	return nil
}

// transmit puts one copy on the network, subject to partitions, the hook,
// loss and duplication. The random draws happen for every copy in the same
// order whatever the outcome, so that one dropped datagram does not shift
// the rest of the run's randomness.
func (s *Sim) transmit(from *Host, d *Datagram) {
	lost := s.Rand.Float64() < s.Opt.Loss
	dup := s.Rand.Float64() < s.Opt.Dup
	delay1, delay2 := s.delay(), s.delay()
	if !s.Linked(d.From, d.To) {
		s.Stats.Cut++
		return
	}
	if s.Opt.Drop != nil && s.Opt.Drop(d) {
		s.Stats.Lost++
		return
	}
	if lost {
		s.Stats.Lost++
		return
	}
	from.lastSent = append(from.lastSent, s.schedule(d, delay1))
	if dup {
		s.schedule(d, delay2)
	}
}

func (s *Sim) delay() int64 {
	return int64(s.Opt.MinDelay + s.Rand.Intn(s.Opt.MaxDelay-s.Opt.MinDelay+1))
}

func (s *Sim) schedule(d *Datagram, delay int64) *delivery {
	s.seq++
	dl := &delivery{at: s.Now + delay, seq: s.seq, dgram: d}
	heap.Push(&s.queue, dl)
	return dl
}

func (s *Sim) tracef(format string, args ...any) {
	if s.Opt.Trace != nil {
		s.Opt.Trace(fmt.Sprintf("%6d.%d ", s.Now/SubTicks, s.Now%SubTicks) + fmt.Sprintf(format, args...))
	}
}

// brief renders a message's fields for traces.
func brief(m wire.Message) string {
	s := fmt.Sprintf("%+v", m)
	s = strings.TrimPrefix(s, "&{_struct:{} ")
	return strings.TrimSuffix(s, "}")
}

type delivery struct {
	at    int64
	seq   uint64
	dgram *Datagram
	held  bool // caught by a pause before it left
}

// deliveries is a min-heap by (time, sequence): ties go in send order.
type deliveries []*delivery

func (q deliveries) Len() int { return len(q) }
func (q deliveries) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q deliveries) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *deliveries) Push(x any)   { *q = append(*q, x.(*delivery)) }
func (q *deliveries) Pop() any {
	old := *q
	d := old[len(old)-1]
	*q = old[:len(old)-1]
	return d
}

// Replay delivers a copy of d once more, delay sub-ticks from now: a copy
// that a switch or a retransmitting driver held back for long, which a
// scripted test puts exactly where it hurts.
func (s *Sim) Replay(d *Datagram, delay int64) { s.schedule(d, delay) }
