package simtest

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/clock"
	"github.com/mcnode/mcnode/wire"
)

// Checker holds the invariants of a run and the violations found.
type Checker struct {
	s          *Sim
	Violations []string

	holders   map[string]int // resource → host that holds it, per the nodes' own events
	lastToken map[string]uint64
	log       map[uint64]wire.Decision // the first decision seen on the wire for each T
	decider   map[uint64]wire.NodeID   // who sent it first: the node that made it
	ref       *reference

	pending map[pendingKey]int64 // outstanding requests → tick issued
	server  int                  // the one live host acting as server, -1 if none
	// Waits are the ticks from Acquire to grant of every granted request.
	Waits []int64
}

type pendingKey struct {
	host int
	inc  uint64
	req  uint64
}

func newChecker(s *Sim) *Checker {
	return &Checker{
		s:         s,
		holders:   map[string]int{},
		lastToken: map[string]uint64{},
		log:       map[uint64]wire.Decision{},
		decider:   map[uint64]wire.NodeID{},
		ref:       newReference(),
		pending:   map[pendingKey]int64{},
		server:    -1,
	}
}

func (c *Checker) violate(format string, args ...any) {
	msg := fmt.Sprintf("tick %d: ", c.s.Tick()) + fmt.Sprintf(format, args...)
	c.Violations = append(c.Violations, msg)
	c.s.tracef("VIOLATION %s", msg)
}

// sent records every decision that goes on the wire. Agreement: there is at
// most one decision for each T, whoever sends it, however often.
func (c *Checker) sent(h *Host, p *wire.Packet) {
	for _, m := range p.Messages {
		d, ok := m.(wire.Decision)
		if !ok {
			continue
		}
		t, _ := d.Stamp()
		if prev, ok := c.log[t]; ok {
			if !reflect.DeepEqual(prev, d) {
				c.violate("two decisions for T=%d: %s %s (first) and %s %s (from h%d)", t, prev.Kind(), brief(prev), d.Kind(), brief(d), h.Index)
			}
			continue
		}
		c.log[t] = d
		c.decider[t] = h.Node.ID()
		if c.ref.turn == 0 {
			c.ref.turn = h.Node.Params().TurnLength
		}
	}
	for _, err := range c.ref.advance(c.log, c.decider) {
		c.violate("%s", err)
	}
}

// event checks what a node reports to its application.
func (c *Checker) event(h *Host, e arbiter.Event) {
	switch e.Kind {
	case arbiter.EventGranted:
		c.s.Stats.Entries++
		if want, ok := c.ref.grants[grantKey{e.Resource, e.Token}]; !ok || want != h.Node.ID() {
			c.violate("h%d (node %d) granted %q token %d, but the log's FIFO order gives it to node %d", h.Index, h.Node.ID(), e.Resource, e.Token, want)
		}
		if other, ok := c.holders[e.Resource]; ok && other != h.Index {
			c.violate("mutual exclusion: h%d granted %q (token %d) while h%d holds it", h.Index, e.Resource, e.Token, other)
		}
		if e.Token <= c.lastToken[e.Resource] {
			c.violate("fencing token for %q went from %d to %d", e.Resource, c.lastToken[e.Resource], e.Token)
		}
		c.lastToken[e.Resource] = e.Token
		c.holders[e.Resource] = h.Index
		key := pendingKey{h.Index, h.Node.Inc(), e.Req}
		if at, ok := c.pending[key]; ok {
			c.Waits = append(c.Waits, c.s.Tick()-at)
			delete(c.pending, key)
		}
	case arbiter.EventLost:
		if c.holders[e.Resource] == h.Index {
			delete(c.holders, e.Resource)
		}
	case arbiter.EventRemoved, arbiter.EventLeft, arbiter.EventGroupFull:
		c.dropHost(h)
	}
}

// Log returns the decisions sent so far, in log order (following Next from
// the first), and the node that made each.
func (c *Checker) Log() []Decided {
	var out []Decided
	for t := uint64(1); ; {
		d, ok := c.log[t]
		if !ok {
			return out
		}
		out = append(out, Decided{Decision: d, By: c.decider[t]})
		_, t = d.Stamp()
	}
}

// Decided is one decision of the log and the node that made it.
type Decided struct {
	wire.Decision
	By wire.NodeID
}

// Acquired records a request the workload made, for the liveness check.
func (c *Checker) Acquired(h *Host, req uint64) {
	c.pending[pendingKey{h.Index, h.Node.Inc(), req}] = c.s.Tick()
}

// Released records that the workload released a resource.
func (c *Checker) Released(h *Host, resource string) {
	if c.holders[resource] == h.Index {
		delete(c.holders, resource)
	}
}

// Cancelled records that the workload withdrew a request.
func (c *Checker) Cancelled(h *Host, req uint64) {
	delete(c.pending, pendingKey{h.Index, h.Node.Inc(), req})
}

func (c *Checker) crashed(h *Host) { c.dropHost(h) }

// dropHost forgets what a stopped process held and waited for: a dead
// process uses nothing, and its requests are void.
func (c *Checker) dropHost(h *Host) {
	for r, i := range c.holders {
		if i == h.Index {
			delete(c.holders, r)
		}
	}
	for k := range c.pending {
		if k.host == h.Index && k.inc == h.Node.Inc() {
			delete(c.pending, k)
		}
	}
}

// afterDelivery checks that what the node believes it holds is what its
// events said, after every datagram it receives.
func (c *Checker) afterDelivery(h *Host) {
	if !h.Alive {
		return
	}
	held := h.Node.Held()
	for _, x := range held {
		if c.holders[x.Resource] != h.Index {
			c.violate("h%d holds %q (token %d) without a grant event on record", h.Index, x.Resource, x.Token)
		}
	}
	for r, i := range c.holders {
		if i == h.Index && !slices.ContainsFunc(held, func(x arbiter.Held) bool { return x.Resource == r }) {
			c.violate("h%d reported %q granted and never lost, but no longer holds it", h.Index, r)
		}
	}
	c.serverAfterStep(h)
}

// oneServer checks that at most one live node acts as server: the old
// server stops before it sends its SYNC, the next starts after applying it.
// It looks at every host, once a tick; serverAfterStep keeps the check
// between ticks.
func (c *Checker) oneServer() {
	var servers []int
	for _, h := range c.s.Hosts {
		if h.Alive && h.Node.IsServer() {
			servers = append(servers, h.Index)
		}
	}
	c.server = -1
	if len(servers) > 0 {
		c.server = servers[0]
	}
	if len(servers) > 1 {
		c.violate("two servers at once: hosts %v", servers)
	}
}

// serverAfterStep checks one server after host h stepped: only h can have
// changed, so it is enough to compare h with the server on record. (A scan
// of every host after every delivery costs O(N) per datagram copy, O(N^2)
// per multicast, which made large groups crawl.)
func (c *Checker) serverAfterStep(h *Host) {
	if !h.Node.IsServer() {
		if c.server == h.Index {
			c.server = -1
		}
		return
	}
	if c.server >= 0 && c.server != h.Index {
		if o := c.s.Hosts[c.server]; o.Alive && o.Node.IsServer() {
			c.violate("two servers at once: hosts %v", []int{min(o.Index, h.Index), max(o.Index, h.Index)})
		}
	}
	c.server = h.Index
}

// Outstanding returns the requests not yet granted, with the tick each was
// made.
func (c *Checker) Outstanding() map[pendingKey]int64 { return c.pending }

// reference is an independent, minimal model of the replicated FIFO state:
// fed the decision log in T order, it says who must hold each resource under
// each token. A node's grant that disagrees is a violation of FIFO order (or
// of the log).
type reference struct {
	t       uint64
	turn    uint64 // the group's turn length
	members map[wire.NodeID]bool
	res     map[string]*refResource
	grants  map[grantKey]wire.NodeID
}

type grantKey struct {
	resource string
	token    uint64
}

type refResource struct {
	holder wire.NodeID
	token  uint64
	queue  []wire.Waiter
}

func newReference() *reference {
	return &reference{t: 1, members: map[wire.NodeID]bool{1: true}, res: map[string]*refResource{}, grants: map[grantKey]wire.NodeID{}}
}

// advance applies every decision that is next in line, checking first that
// the member that made it was the server for its T: the role never moves
// without a decision saying where to.
func (r *reference) advance(log map[uint64]wire.Decision, decider map[uint64]wire.NodeID) (errs []string) {
	for {
		d, ok := log[r.t]
		if !ok {
			return errs
		}
		t, next := d.Stamp()
		if srv := r.server(t); srv != decider[t] {
			errs = append(errs, fmt.Sprintf("decision %s at T=%d made by node %d, but the server for T=%d is node %d", d.Kind(), t, decider[t], t, srv))
		}
		if t%r.turn == r.turn-1 && d.Kind() != wire.KindSync {
			errs = append(errs, fmt.Sprintf("the last timestamp of a turn, T=%d, went to a %s instead of a SYNC", t, d.Kind()))
		}
		if err := r.apply(d, t); err != "" {
			errs = append(errs, fmt.Sprintf("reference model at T=%d: %s", t, err))
		}
		r.t = next
	}
}

func (r *reference) server(t uint64) wire.NodeID {
	ids := make([]wire.NodeID, 0, len(r.members))
	for id := range r.members {
		ids = append(ids, id)
	}
	sched, err := clock.NewSchedule(ids, r.turn)
	if err != nil {
		return 0
	}
	srv, _ := sched.ServerAt(t)
	return srv
}

func (r *reference) resource(name string) *refResource {
	x := r.res[name]
	if x == nil {
		x = &refResource{}
		r.res[name] = x
	}
	return x
}

func (r *reference) give(name string, x *refResource, t uint64) {
	x.holder, x.token = 0, 0
	if len(x.queue) > 0 {
		x.holder, x.token = x.queue[0].Node, t
		x.queue = x.queue[1:]
		r.grants[grantKey{name, t}] = x.holder
	}
}

func (r *reference) remove(id wire.NodeID, t uint64) {
	delete(r.members, id)
	names := make([]string, 0, len(r.res))
	for name := range r.res {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		x := r.res[name]
		x.queue = slices.DeleteFunc(x.queue, func(w wire.Waiter) bool { return w.Node == id })
		if x.holder == id {
			r.give(name, x, t)
		}
	}
}

func (r *reference) apply(d wire.Decision, t uint64) string {
	switch d := d.(type) {
	case *wire.OkToJoin:
		r.members[d.ID] = true
	case *wire.Left:
		r.remove(d.ID, t)
	case *wire.Sync:
		for _, id := range d.Remove {
			r.remove(id, t)
		}
	case *wire.Grant:
		if !r.members[d.Node] {
			return fmt.Sprintf("grant to non-member %d", d.Node)
		}
		x := r.resource(d.Resource)
		free := x.holder == 0 && len(x.queue) == 0
		if free == d.Queued {
			return fmt.Sprintf("grant of %q to %d says queued=%v, model says free=%v", d.Resource, d.Node, d.Queued, free)
		}
		if free {
			x.holder, x.token = d.Node, t
			r.grants[grantKey{d.Resource, t}] = d.Node
		} else {
			x.queue = append(x.queue, wire.Waiter{Node: d.Node, Req: d.Req, Since: t})
		}
	case *wire.Released:
		x := r.resource(d.Resource)
		if d.Withdrawn {
			x.queue = slices.DeleteFunc(x.queue, func(w wire.Waiter) bool { return w.Node == d.Node && w.Req == d.Req })
			return ""
		}
		if x.holder != d.Node || x.token != d.Token {
			return fmt.Sprintf("release of %q by %d token %d, model holder %d token %d", d.Resource, d.Node, d.Token, x.holder, x.token)
		}
		r.give(d.Resource, x, t)
	}
	return ""
}
