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

	holders   map[string]*holder // resource → who holds it, per the nodes' own events
	lastToken map[string]uint64
	// The decisions seen on the wire, by (epoch, T): within an epoch there
	// is one log, so at most one decision for each. A takeover starts a new
	// epoch's log from a point of an older one; an older epoch's server cut
	// off from the group may go on deciding on its own branch for a while,
	// and every branch is checked against its own reference.
	log       map[logKey]wire.Decision
	decider   map[logKey]wire.NodeID
	takeovers map[uint64]*wire.Takeover
	refs      map[uint64]*reference // by epoch
	grants    map[grantKey]wire.NodeID
	turn      uint64
	// handovers has, by an epoch's log, a resource and a holder's token, who
	// the log handed the resource to after that holder; early, who took it on
	// that holder's release before the decision (arbiter.Event.After), in
	// the epoch of its log then. Only one epoch's log is compared with an
	// early taker: another branch, cut off, may hand the resource on to
	// another (its grant never takes effect; the overlap check says so if
	// it does).
	handovers map[handoverKey]wire.NodeID
	early     map[handoverKey]*holder

	pending map[pendingKey]int64 // outstanding requests → tick issued
	server  int                  // the one live host acting as server with authority, -1 if none
	// Waits are the ticks from Acquire to grant of every granted request.
	Waits []int64
}

type logKey struct{ epoch, t uint64 }

// holder is a resource's holder. A running holder holds until its own
// events say it stopped; a crashed or paused one is counted as holding
// until its lease has run out on its own clock (until, in fine units): a
// crash or a pause looks the same to the group as a cut-off process that
// goes on working, and that one stops only when its lease says so.
type holder struct {
	host  int
	inc   uint64
	node  wire.NodeID
	token uint64
	until int64
}

type pendingKey struct {
	host int
	inc  uint64
	req  uint64
}

func newChecker(s *Sim) *Checker {
	return &Checker{
		s:         s,
		holders:   map[string]*holder{},
		lastToken: map[string]uint64{},
		log:       map[logKey]wire.Decision{},
		decider:   map[logKey]wire.NodeID{},
		takeovers: map[uint64]*wire.Takeover{},
		refs:      map[uint64]*reference{},
		grants:    map[grantKey]wire.NodeID{},
		handovers: map[handoverKey]wire.NodeID{},
		early:     map[handoverKey]*holder{},
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
// most one decision for each (epoch, T), whoever sends it, however often.
func (c *Checker) sent(h *Host, p *wire.Packet) {
	for _, m := range p.Messages {
		d, ok := m.(wire.Decision)
		if !ok {
			continue
		}
		t, _ := d.Stamp()
		k := logKey{d.Era(), t}
		if prev, ok := c.log[k]; ok {
			if !reflect.DeepEqual(prev, d) {
				c.violate("two decisions for epoch %d T=%d: %s %s (first) and %s %s (from h%d)", k.epoch, t, prev.Kind(), brief(prev), d.Kind(), brief(d), h.Index)
			}
			continue
		}
		c.log[k] = d
		c.decider[k] = h.Node.ID()
		if c.turn == 0 {
			c.turn = h.Node.Params().TurnLength
			c.refs[1] = newReference(c.turn)
		}
		if tk, ok := d.(*wire.Takeover); ok {
			if _, dup := c.takeovers[tk.Epoch]; dup {
				c.violate("two takeovers of epoch %d", tk.Epoch)
				continue
			}
			c.takeovers[tk.Epoch] = tk
			c.refs[tk.Epoch] = c.buildRef(tk)
		}
		if r := c.refs[k.epoch]; r != nil {
			c.advance(r, k.epoch)
		}
	}
}

// Observers counts, in every epoch's log, the newcomers admitted as
// observers, the observers promoted and the voters demoted: what a test of
// observers must see happen to prove anything.
func (c *Checker) Observers() (admitted, promoted, demoted int) {
	for _, d := range c.log {
		switch d := d.(type) {
		case *wire.OkToJoin:
			if d.Observer {
				admitted++
			}
		case *wire.Sync:
			if d.Promote != 0 {
				promoted++
			}
			if d.Demote != 0 {
				demoted++
			}
		}
	}
	return admitted, promoted, demoted
}

// buildRef replays the log that a takeover continues, epoch by epoch from
// the founding, up to where the takeover begins.
func (c *Checker) buildRef(tk *wire.Takeover) *reference {
	var chain []uint64
	for e := tk.PrevEpoch; e != 0; {
		chain = append(chain, e)
		prev, ok := c.takeovers[e]
		if !ok {
			break
		}
		e = prev.PrevEpoch
	}
	slices.Reverse(chain)
	r := newReference(c.turn)
	for i, e := range chain {
		stop := tk.T
		if i+1 < len(chain) {
			stop = c.takeovers[chain[i+1]].T
		}
		for r.t < stop {
			d, ok := c.log[logKey{e, r.t}]
			if !ok {
				c.violate("epoch %d begins at T=%d of epoch %d's log, whose decision at T=%d was never sent", tk.Epoch, tk.T, tk.PrevEpoch, r.t)
				return r
			}
			c.step(r, e, d)
		}
	}
	return r
}

// advance applies every decision of epoch e that is next in line for r.
func (c *Checker) advance(r *reference, e uint64) {
	for {
		d, ok := c.log[logKey{e, r.t}]
		if !ok {
			return
		}
		c.step(r, e, d)
	}
}

// step applies one decision to a reference, checking first that the member
// that made it was the server for its T in that log: the role never moves
// without a decision saying where to.
func (c *Checker) step(r *reference, e uint64, d wire.Decision) {
	t, next := d.Stamp()
	by := c.decider[logKey{e, t}]
	tk, isTakeover := d.(*wire.Takeover)
	switch {
	case isTakeover:
		if by != tk.Server || r.server(next) != tk.Server {
			c.violate("takeover of epoch %d at T=%d sent first by node %d for server %d, whose turn the schedule does not start at T=%d", tk.Epoch, t, by, tk.Server, next)
		}
		if r.observers[tk.Backup] {
			c.violate("takeover of epoch %d names node %d its backup, an observer", tk.Epoch, tk.Backup)
		}
	case r.server(t) != by:
		c.violate("decision %s at epoch %d T=%d made by node %d, but the server for T=%d is node %d", d.Kind(), e, t, by, t, r.server(t))
	}
	if t%r.turn == r.turn-1 && d.Kind() != wire.KindSync && !isTakeover {
		c.violate("the last timestamp of a turn, T=%d, went to a %s instead of a SYNC", t, d.Kind())
	}
	if err := r.apply(d, t); err != "" {
		c.violate("reference model at epoch %d T=%d: %s", e, t, err)
	}
	for k, node := range r.newGrants {
		if prev, ok := c.grants[k]; ok && prev != node {
			c.violate("token %d of %q given to node %d in one log and to node %d in another", k.token, k.resource, prev, node)
		}
		c.grants[k] = node
	}
	clear(r.newGrants)
	for gk, node := range r.newHandovers {
		k := handoverKey{e, gk}
		c.handovers[k] = node
		// Unless the early taker stopped and its lease has run out since:
		// the log removes a dead member after its lease, and may do so
		// before it decides the release that member took the resource
		// on (both died at once: seed 13396 of the observers' test).
		if x := c.early[k]; x != nil && x.node != node && c.holders[k.resource] == x && (x.until == 0 || c.s.Now*fine < x.until) {
			c.violate("the log hands %q over after token %d to node %d, while node %d holds it, taken on that holder's release", k.resource, k.token, node, x.node)
		}
	}
	clear(r.newHandovers)
	r.t = next
}

// event checks what a node reports to its application.
func (c *Checker) event(h *Host, e arbiter.Event) {
	switch e.Kind {
	case arbiter.EventGranted:
		c.s.Stats.Entries++
		var early handoverKey
		if e.After != 0 {
			// Taken on the holder's release: the log must hand the
			// resource over to this node after that holder (checked here,
			// or in step when the log gets there).
			early = handoverKey{e.Epoch, grantKey{e.Resource, e.After}}
			if want, ok := c.handovers[early]; ok && want != h.Node.ID() {
				c.violate("h%d (node %d) took %q on the release of the holder with token %d, but the log hands it over to node %d", h.Index, h.Node.ID(), e.Resource, early.token, want)
			}
		} else if want, ok := c.grants[grantKey{e.Resource, e.Token}]; !ok || want != h.Node.ID() {
			c.violate("h%d (node %d) granted %q token %d, but the log's FIFO order gives it to node %d", h.Index, h.Node.ID(), e.Resource, e.Token, want)
		}
		if old := c.holders[e.Resource]; old != nil && !(old.host == h.Index && old.inc == h.Node.Inc()) {
			switch {
			case old.until == 0:
				c.violate("mutual exclusion: h%d granted %q (token %d) while h%d holds it (token %d)", h.Index, e.Resource, e.Token, old.host, old.token)
			case c.s.Now*fine < old.until:
				c.violate("mutual exclusion: h%d granted %q (token %d) while h%d, stopped, may use it (token %d) for %d more ticks of its lease",
					h.Index, e.Resource, e.Token, old.host, old.token, (old.until-c.s.Now*fine)/(SubTicks*fine)+1)
			}
		}
		if e.Token <= c.lastToken[e.Resource] {
			c.violate("fencing token for %q went from %d to %d", e.Resource, c.lastToken[e.Resource], e.Token)
		}
		c.lastToken[e.Resource] = e.Token
		c.holders[e.Resource] = &holder{host: h.Index, inc: h.Node.Inc(), node: h.Node.ID(), token: e.Token}
		if e.After != 0 {
			c.early[early] = c.holders[e.Resource]
		}
		key := pendingKey{h.Index, h.Node.Inc(), e.Req}
		if at, ok := c.pending[key]; ok {
			c.Waits = append(c.Waits, c.s.Tick()-at)
			delete(c.pending, key)
		}
	case arbiter.EventLost:
		if x := c.holders[e.Resource]; x != nil && x.host == h.Index && x.inc == h.Node.Inc() {
			delete(c.holders, e.Resource)
		}
	case arbiter.EventRefused:
		// Answered: the lock table had no room (a node's state that would
		// have granted it counts a divergence, which the tests check).
		delete(c.pending, pendingKey{h.Index, h.Node.Inc(), e.Req})
		c.s.Stats.Refused++
	case arbiter.EventRemoved, arbiter.EventLeft, arbiter.EventGroupFull:
		c.dropPending(h)
	}
}

// Log returns the decisions of the group's log, in order (following Next
// from the first, through every takeover, along the newest epoch's
// branch), and the node that made each.
func (c *Checker) Log() []Decided {
	last := uint64(1)
	for e := range c.takeovers {
		last = max(last, e)
	}
	chain := []uint64{last}
	for e := last; c.takeovers[e] != nil; {
		e = c.takeovers[e].PrevEpoch
		chain = append(chain, e)
	}
	slices.Reverse(chain)
	var out []Decided
	t := uint64(1)
	for i, e := range chain {
		stop := ^uint64(0)
		if i+1 < len(chain) {
			stop = c.takeovers[chain[i+1]].T
		}
		for t < stop {
			d, ok := c.log[logKey{e, t}]
			if !ok {
				break
			}
			out = append(out, Decided{Decision: d, By: c.decider[logKey{e, t}]})
			_, t = d.Stamp()
		}
	}
	return out
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
	if x := c.holders[resource]; x != nil && x.host == h.Index && x.inc == h.Node.Inc() {
		delete(c.holders, resource)
	}
}

// Cancelled records that the workload withdrew a request.
func (c *Checker) Cancelled(h *Host, req uint64) {
	delete(c.pending, pendingKey{h.Index, h.Node.Inc(), req})
}

// stopped records that a host crashed or paused: what it holds it may go on
// using (the group cannot tell it from a cut-off process) until its lease
// runs out on its own clock, and a crashed host's requests are void.
func (c *Checker) stopped(h *Host) {
	until := c.leaseEnd(h)
	for _, x := range c.holders {
		if x.host == h.Index && x.inc == h.Node.Inc() {
			x.until = until
		}
	}
}

// resumed records that a paused host runs again: its own events say from
// now on what it holds (it has caught up on its clock first).
func (c *Checker) resumed(h *Host) {
	for r, x := range c.holders {
		if x.host == h.Index && x.inc == h.Node.Inc() {
			if h.Node.LeaseExpiry() <= h.Node.Now() {
				delete(c.holders, r) // it found its lease run out
				continue
			}
			x.until = 0
		}
	}
}

// leaseEnd is the virtual time (fine units) at which host h's node finds its
// lease run out: the tick of its own clock numbered LeaseExpiry.
func (c *Checker) leaseEnd(h *Host) int64 {
	n := h.Node
	left := int64(n.LeaseExpiry()) - int64(n.Now()) - 1
	if left < 0 {
		return c.s.Now * fine
	}
	return h.nextTick + left*h.period
}

func (c *Checker) dropPending(h *Host) {
	for k := range c.pending {
		if k.host == h.Index && k.inc == h.Node.Inc() {
			delete(c.pending, k)
		}
	}
}

// crashed voids a crashed host's requests: a dead process waits for nothing.
func (c *Checker) crashed(h *Host) { c.dropPending(h) }

// afterDelivery checks that what the node believes it holds is what its
// events said, after every datagram it receives.
func (c *Checker) afterDelivery(h *Host) {
	if !h.Alive {
		return
	}
	held := h.Node.Held()
	for _, x := range held {
		if y := c.holders[x.Resource]; y == nil || y.host != h.Index || y.inc != h.Node.Inc() {
			c.violate("h%d holds %q (token %d) without a grant event on record", h.Index, x.Resource, x.Token)
		}
	}
	for r, y := range c.holders {
		if y.host == h.Index && y.inc == h.Node.Inc() && !slices.ContainsFunc(held, func(x arbiter.Held) bool { return x.Resource == r }) {
			c.violate("h%d reported %q granted and never lost, but no longer holds it", h.Index, r)
		}
	}
	c.serverAfterStep(h)
}

// stateCheckTicks is how often, in ticks, the checker makes sure every
// node's state could be sent in a state transfer.
const stateCheckTicks = 64

// statesSendable checks that every running node's state passes the checks
// a state transfer makes: one that did not could be sent to no newcomer and
// no member that fell behind (a decided list that outgrew its limit did so
// once, see arbiter's member.markDecided).
func (c *Checker) statesSendable() {
	for _, h := range c.s.Hosts {
		if !h.Alive {
			continue
		}
		if err := h.Node.CheckState(); err != nil {
			c.violate("h%d (node %d): its state could not be sent: %v", h.Index, h.Node.ID(), err)
		}
	}
}

// acting reports whether host h acts as a server that may decide: it runs,
// and a majority answered it within its authority.
func acting(h *Host) bool { return h.Alive && !h.Paused && h.Node.IsServer() && h.Node.HasAuthority() }

// oneServer checks that at most one running node acts as server with a
// majority's authority: the old server stops before it sends its SYNC, the
// next starts after applying it, and an old epoch's server lost its
// authority before a takeover could win its votes. It looks at every host,
// once a tick; serverAfterStep keeps the check between ticks.
func (c *Checker) oneServer() {
	var servers []int
	for _, h := range c.s.Hosts {
		if acting(h) {
			servers = append(servers, h.Index)
		}
	}
	c.server = -1
	if len(servers) > 0 {
		c.server = servers[0]
	}
	if len(servers) > 1 {
		c.violate("two servers with authority at once: hosts %v", servers)
	}
}

// serverAfterStep checks one server after host h stepped: only h can have
// changed, so it is enough to compare h with the server on record. (A scan
// of every host after every delivery costs O(N) per datagram copy, O(N^2)
// per multicast, which made large groups crawl.)
func (c *Checker) serverAfterStep(h *Host) {
	if !acting(h) {
		if c.server == h.Index {
			c.server = -1
		}
		return
	}
	if c.server >= 0 && c.server != h.Index {
		if o := c.s.Hosts[c.server]; acting(o) {
			c.violate("two servers with authority at once: hosts %v", []int{min(o.Index, h.Index), max(o.Index, h.Index)})
		}
	}
	c.server = h.Index
}

// Outstanding returns the requests not yet granted, with the tick each was
// made.
func (c *Checker) Outstanding() map[pendingKey]int64 { return c.pending }

// reference is an independent, minimal model of the replicated FIFO state:
// fed one branch of the decision log in T order, it says who must hold each
// resource under each token. A node's grant that disagrees is a violation of
// FIFO order (or of the log).
type reference struct {
	t         uint64
	turn      uint64 // the group's turn length
	members   map[wire.NodeID]bool
	observers map[wire.NodeID]bool // members that neither vote nor serve
	res       map[string]*refResource
	newGrants map[grantKey]wire.NodeID
	// newHandovers: by a resource and the token of the holder that gave it
	// up, whom it passed to.
	newHandovers map[grantKey]wire.NodeID
}

type handoverKey struct {
	epoch uint64
	grantKey
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

func newReference(turn uint64) *reference {
	return &reference{t: 1, turn: turn, members: map[wire.NodeID]bool{1: true}, observers: map[wire.NodeID]bool{}, res: map[string]*refResource{}, newGrants: map[grantKey]wire.NodeID{}, newHandovers: map[grantKey]wire.NodeID{}}
}

func (r *reference) server(t uint64) wire.NodeID {
	ids := make([]wire.NodeID, 0, len(r.members))
	for id := range r.members {
		if !r.observers[id] {
			ids = append(ids, id) // only voters serve
		}
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

// give passes the resource to the head of its queue under token t. It
// reports a second hand-over of the resource by the same decision: the two
// holders would share a fencing token.
func (r *reference) give(name string, x *refResource, t uint64) string {
	prev := x.token
	x.holder, x.token = 0, 0
	if len(x.queue) > 0 {
		if by, ok := r.newGrants[grantKey{name, t}]; ok {
			return fmt.Sprintf("%q handed to node %d and then to node %d by the decision at T=%d: two holders of token %d", name, by, x.queue[0].Node, t, t)
		}
		x.holder, x.token = x.queue[0].Node, t
		r.newHandovers[grantKey{name, prev}] = x.holder
		x.queue = x.queue[1:]
		r.newGrants[grantKey{name, t}] = x.holder
	}
	return ""
}

// remove drops the members ids at once (a Left, or a SYNC's removals): none
// of them is handed anything another held.
func (r *reference) remove(ids []wire.NodeID, t uint64) string {
	gone := func(id wire.NodeID) bool { return slices.Contains(ids, id) }
	for name, x := range r.res {
		// The head may have taken it on the holder's release, with this T as
		// its token: the next holder's must be larger.
		if gone(x.holder) && len(x.queue) > 0 && x.queue[0].Node != x.holder && gone(x.queue[0].Node) {
			return fmt.Sprintf("T=%d removes node %d, holder of %q, and node %d, first in its queue", t, x.holder, name, x.queue[0].Node)
		}
	}
	for _, id := range ids {
		delete(r.members, id)
		delete(r.observers, id)
	}
	names := make([]string, 0, len(r.res))
	for name := range r.res {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		x := r.res[name]
		x.queue = slices.DeleteFunc(x.queue, func(w wire.Waiter) bool { return gone(w.Node) })
		if gone(x.holder) {
			if err := r.give(name, x, t); err != "" {
				return err
			}
		}
	}
	return ""
}

func (r *reference) apply(d wire.Decision, t uint64) string {
	switch d := d.(type) {
	case *wire.OkToJoin:
		if voters := len(r.members) - len(r.observers); d.Observer && voters < arbiter.MinVoters {
			return fmt.Sprintf("node %d admitted as an observer with %d voters", d.ID, voters)
		}
		r.members[d.ID] = true
		if d.Observer {
			r.observers[d.ID] = true
		}
	case *wire.Left:
		if err := r.remove([]wire.NodeID{d.ID}, t); err != "" {
			return err
		}
	case *wire.Sync:
		for _, id := range d.RemoveObservers {
			if !r.observers[id] {
				return fmt.Sprintf("SYNC removes node %d as an observer, which is none", id)
			}
		}
		if err := r.remove(d.Removed(), t); err != "" {
			return err
		}
		if r.observers[d.Backup] && d.Backup != d.Promote {
			return fmt.Sprintf("SYNC names node %d the backup, an observer", d.Backup)
		}
		if d.Promote != 0 {
			if !r.observers[d.Promote] {
				return fmt.Sprintf("promotion of node %d, which is no observer", d.Promote)
			}
			if voters := len(r.members) - len(r.observers); voters > arbiter.MinVoters {
				return fmt.Sprintf("promotion of node %d with %d voters", d.Promote, voters)
			}
			delete(r.observers, d.Promote)
		}
		if d.Demote != 0 {
			if !r.members[d.Demote] || r.observers[d.Demote] {
				return fmt.Sprintf("demotion of node %d, which is no voter", d.Demote)
			}
			if voters := len(r.members) - len(r.observers); voters <= arbiter.MinVoters {
				return fmt.Sprintf("demotion of node %d with %d voters", d.Demote, voters)
			}
			r.observers[d.Demote] = true
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
			r.newGrants[grantKey{d.Resource, t}] = d.Node
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
		return r.give(d.Resource, x, t)
	}
	return ""
}
