package arbiter

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/mcnode/mcnode/clock"
	"github.com/mcnode/mcnode/wire"
)

// state is the replicated state: what every member holds identically once it
// has applied the same decisions. Every change to it is made by applying a
// decision, in T order, and every function here is deterministic (no map is
// iterated where order could leak out).
type state struct {
	instance  uint64
	t         uint64 // the timestamp of the next decision
	nextID    wire.NodeID
	params    wire.Params
	members   []*member          // in ID order
	voters    int                // members that are not observers
	byInc     map[uint64]*member // the same members by incarnation: joins look them up at every node
	resources map[string]*resource
	sched     clock.Schedule[wire.NodeID]

	// epoch is the epoch of the last decision applied: the state is the
	// log of that epoch up to t. epochs records where recent epochs began.
	epoch  uint64
	epochs []wire.EpochMark
	// backup is the member that must hold a decision before a grant it
	// makes takes effect, and to which the server hands its turn: so it
	// holds every decision that took effect, and can take over at once. It
	// is 0 only in a group of one.
	backup wire.NodeID
	// viewT is the timestamp of the last change of the view or of the
	// epoch. The server changes the view again only once a majority has
	// applied it (see Node.viewCommitted).
	viewT uint64
	// size bounds the encoding of the state's snapshot (wire.SnapshotBound),
	// kept as the state changes: the server admits no request that would
	// take it past what a state transfer may carry (see noRoomFor).
	size int
}

type member struct {
	id      wire.NodeID
	inc     uint64
	addr    string
	silence uint64
	floor   uint64
	decided []uint64 // sorted, all > floor
	// observer: the member takes locks but neither votes, nor serves, nor
	// backs the server up, and no majority counts it (see wire.OkToJoin).
	// transient: it asked to be one, and votes only while the group is
	// short of voters (see wire.Sync's Promote and Demote).
	observer  bool
	transient bool
}

type resource struct {
	holder    wire.NodeID
	holderReq uint64
	token     uint64
	queue     []wire.Waiter
}

// handover records a resource passing to a new holder as a side effect of a
// decision (a release, a withdrawal at the head, a removal).
type handover struct {
	resource string
	to       wire.NodeID
	req      uint64
	token    uint64
}

// taken records a resource taken from a member that left or was removed.
type taken struct {
	resource string
	token    uint64
}

func newState(instance uint64, p wire.Params) *state {
	s := &state{instance: instance, nextID: 1, params: p, byInc: map[uint64]*member{}, resources: map[string]*resource{}, size: wire.SnapshotOverhead}
	_ = s.rebuildSchedule() // no members yet
	return s
}

// rebuildSchedule recomputes the turn schedule, and the count of voters,
// after a change of the view. Only voters serve: the schedule lists them
// alone. Members are kept sorted and unique (addMember refuses a duplicate)
// and TurnLength is validated wherever a state is made, so it cannot fail;
// if it ever did, the old schedule stays and the error says why.
func (s *state) rebuildSchedule() error {
	ids := make([]wire.NodeID, 0, len(s.members))
	for _, m := range s.members {
		if !m.observer {
			ids = append(ids, m.id)
		}
	}
	s.voters = len(ids)
	sched, err := clock.NewSchedule(ids, s.params.TurnLength)
	if err != nil {
		return err
	}
	s.sched = sched
	return nil
}

// markEpoch records that epoch e began at timestamp t.
func (s *state) markEpoch(e, t uint64) {
	s.epoch = e
	s.epochs = append(s.epochs, wire.EpochMark{Epoch: e, T: t})
	if len(s.epochs) > wire.MaxEpochMarks {
		s.epochs = slices.Delete(s.epochs, 0, len(s.epochs)-wire.MaxEpochMarks)
	}
}

// onLog reports whether a node whose log ends at position (e, t) (it
// applied every decision below t, the last of epoch e) holds a prefix of
// this state's log, so that the decisions from t on can be sent to it. A
// node of an older epoch holds a prefix if it stopped at or before where the
// next epoch began; one of an epoch this state no longer records, or of a
// newer one, does not (as far as this state can tell).
func (s *state) onLog(e, t uint64) bool {
	if t > s.t {
		return false
	}
	for i, m := range s.epochs {
		if m.Epoch != e {
			continue
		}
		if i+1 < len(s.epochs) {
			return t <= s.epochs[i+1].T
		}
		return true
	}
	return false
}

func (s *state) member(id wire.NodeID) *member {
	i, ok := slices.BinarySearchFunc(s.members, id, func(m *member, id wire.NodeID) int {
		return cmpID(m.id, id)
	})
	if !ok {
		return nil
	}
	return s.members[i]
}

func (s *state) memberByInc(inc uint64) *member { return s.byInc[inc] }

// votes reports whether id is a member that votes (no observer): one that
// majorities count, and that may serve or back the server up.
func (s *state) votes(id wire.NodeID) bool {
	m := s.member(id)
	return m != nil && !m.observer
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// votersAfter is the turn schedule's view once SYNC d is applied, with the
// voter it removes, promotes or demotes: the view its Next is aligned to
// (endTurn makes it, wantNext checks it).
func (s *state) votersAfter(d *wire.Sync) []wire.NodeID {
	view := slices.DeleteFunc(s.sched.View(), func(id wire.NodeID) bool { return id == d.Remove || id == d.Demote })
	if d.Promote != 0 {
		view = append(view, d.Promote)
	}
	return view
}

// observers counts the members that do not vote.
func (s *state) observers() int { return len(s.members) - s.voters }

func cmpID(a, b wire.NodeID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// server returns the member that is server at the current T.
func (s *state) server() wire.NodeID {
	id, _ := s.sched.ServerAt(s.t)
	return id
}

// addMember adds a member, an observer or a voter. It refuses (false) an ID
// or incarnation already in the view, which a correct log never admits
// twice.
func (s *state) addMember(id wire.NodeID, inc uint64, addr string, observer, transient bool) bool {
	i, found := slices.BinarySearchFunc(s.members, id, func(m *member, id wire.NodeID) int { return cmpID(m.id, id) })
	if found || id == 0 || s.byInc[inc] != nil {
		return false
	}
	m := &member{id: id, inc: inc, addr: addr, observer: observer, transient: transient || observer}
	s.members = slices.Insert(s.members, i, m)
	s.size += wire.MemberBound(len(addr), 0)
	s.byInc[inc] = m
	if id >= s.nextID {
		s.nextID = id + 1
	}
	return s.rebuildSchedule() == nil
}

// removeMembers drops members: the resources they held pass to the heads of
// their queues, and their queued requests are dropped. The decision's T is
// the new holders' fencing token. All are dropped before anything passes
// on, so that a resource passes once at most, to a member that stays: two
// holders, one after the other, with the same token would make tokens no
// longer increase from holder to holder.
func (s *state) removeMembers(ids []wire.NodeID, t uint64) (hand []handover, lost []taken) {
	gone := idSet(ids)
	n := len(s.members)
	for _, m := range s.members {
		if gone[m.id] {
			s.size -= wire.MemberBound(len(m.addr), len(m.decided))
			if s.byInc[m.inc] == m {
				delete(s.byInc, m.inc)
			}
		}
	}
	s.members = slices.DeleteFunc(s.members, func(m *member) bool { return gone[m.id] })
	if len(s.members) == n {
		return nil, nil
	}
	_ = s.rebuildSchedule() // fewer members than before: cannot fail
	if gone[s.backup] {
		s.backup = 0 // the server names another by a new epoch
	}
	for _, name := range s.resourceNames() {
		r := s.resources[name]
		s.dequeue(r, func(w wire.Waiter) bool { return gone[w.Node] })
		if gone[r.holder] {
			lost = append(lost, taken{resource: name, token: r.token})
			if h, ok := s.passOn(name, r, t); ok {
				hand = append(hand, h)
			}
		}
		s.dropIfIdle(name, r)
	}
	return hand, lost
}

// idSet makes a set of ids: removals may list a thousand members, and are
// looked up for every member, holder and waiter.
func idSet(ids []wire.NodeID) map[wire.NodeID]bool {
	in := make(map[wire.NodeID]bool, len(ids))
	for _, id := range ids {
		in[id] = true
	}
	return in
}

// headsRemovedWithHolders returns the members of ids that head the queue of
// a resource whose holder is in ids too. One decision must not remove both:
// the head may have taken the resource on the holder's release
// (enterOnRelease) with that decision's T as its fencing token, so the log
// must hand the resource to it at that T, and on from it only at a later
// one, under a larger token. (A holder that heads its own queue, having
// asked again, is no such head.)
func (s *state) headsRemovedWithHolders(ids []wire.NodeID) map[wire.NodeID][]wire.NodeID {
	if len(ids) < 2 {
		return nil
	}
	in := idSet(ids)
	var behind map[wire.NodeID][]wire.NodeID // a head: the holders it waits behind
	for _, r := range s.resources {
		if head := r.queue; len(head) > 0 && head[0].Node != r.holder && in[r.holder] && in[head[0].Node] {
			if behind == nil {
				behind = map[wire.NodeID][]wire.NodeID{}
			}
			behind[head[0].Node] = append(behind[head[0].Node], r.holder)
		}
	}
	for _, hs := range behind {
		slices.Sort(hs) // the resources' map order must not decide anything
	}
	return behind
}

// removable returns the members of ids, in their order, that one decision
// may remove together (see headsRemovedWithHolders): a head waits for a later
// decision only if the holder it waits behind goes in this one. Holders go
// first, so that a chain of dead members, each holding what the next waits
// for, goes in two decisions, whatever the resources are called; a cycle
// of them may cost a third. It is linear in the resources and the members.
func (s *state) removable(ids []wire.NodeID) []wire.NodeID {
	behind := s.headsRemovedWithHolders(ids)
	if len(behind) == 0 {
		return ids
	}
	const (
		deciding = iota + 1
		goes
		stays
	)
	verdict := map[wire.NodeID]int{}
	var decide func(id wire.NodeID) bool
	decide = func(id wire.NodeID) bool {
		switch verdict[id] {
		case deciding:
			return false // a cycle: counted as staying here, checked below
		case goes:
			return true
		case stays:
			return false
		}
		verdict[id] = deciding
		ok := true
		for _, h := range behind[id] {
			if decide(h) {
				ok = false
			}
		}
		verdict[id] = stays
		if ok {
			verdict[id] = goes
		}
		return ok
	}
	out := slices.DeleteFunc(slices.Clone(ids), func(id wire.NodeID) bool { return !decide(id) })
	// A cycle may leave a head and its holder both going: such heads stay
	// too (all at once: fewer going can make no new pair).
	stay := s.headsRemovedWithHolders(out)
	return slices.DeleteFunc(out, func(id wire.NodeID) bool { _, ok := stay[id]; return ok })
}

// headIs reports whether node waits first in the queue of a resource held
// by another, by request req (any request, if req is 0): a head whose
// leaving moves the next waiter up.
func (s *state) headIs(resource string, node wire.NodeID, req uint64) bool {
	r := s.resources[resource]
	return r != nil && r.holder != node && len(r.queue) > 1 && r.queue[0].Node == node && (req == 0 || r.queue[0].Req == req)
}

// resourceNames returns the resource names in sorted order: the only order
// in which the state is ever walked.
func (s *state) resourceNames() []string {
	names := make([]string, 0, len(s.resources))
	for name := range s.resources {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// passOn frees r and gives it to the head of its queue, if any, under token t.
func (s *state) passOn(name string, r *resource, t uint64) (handover, bool) {
	r.holder, r.holderReq, r.token = 0, 0, 0
	if len(r.queue) == 0 {
		return handover{}, false
	}
	w := r.queue[0]
	r.queue = r.queue[1:]
	s.size -= wire.WaiterBound
	r.holder, r.holderReq, r.token = w.Node, w.Req, t
	return handover{resource: name, to: w.Node, req: w.Req, token: t}, true
}

func (s *state) dropIfIdle(name string, r *resource) {
	if r.holder == 0 && len(r.queue) == 0 {
		delete(s.resources, name)
		s.size -= wire.ResourceBound(len(name))
	}
}

// dequeue drops the waiters of r that drop reports.
func (s *state) dequeue(r *resource, drop func(wire.Waiter) bool) {
	n := len(r.queue)
	r.queue = slices.DeleteFunc(r.queue, drop)
	s.size -= (n - len(r.queue)) * wire.WaiterBound
}

// sent reports whether a datagram with header h from address src is this
// member's: its ID under another incarnation or from another address is
// not (a forgery, or an ID given in a branch of the log a takeover cut off
// and given again).
func (m *member) sent(h wire.Header, src string) bool {
	return m.inc == h.Inc && m.addr == src
}

// isDecided reports whether request req of member m has been decided.
func (m *member) isDecided(req uint64) bool {
	if req <= m.floor {
		return true
	}
	_, found := slices.BinarySearch(m.decided, req)
	return found
}

// markDecided is member.markDecided, which may lengthen or shorten the
// member's decided list, in the state's size.
func (s *state) markDecided(m *member, req, floor uint64) {
	before := wire.MemberBound(len(m.addr), len(m.decided))
	m.markDecided(req, floor)
	s.size += wire.MemberBound(len(m.addr), len(m.decided)) - before
}

// markDecided records req as decided and forgets what the member's floor
// says it no longer retries. The floor also rises over the decided requests
// right above it: a member's own floor stays below every request it has
// pending, queued ones too (see Node.floor), so while one request waits
// long, the member's requests decided meanwhile would otherwise pile up in
// the list, and in every snapshot, without bound (past Limits.MaxDecided no
// snapshot validates, and no member could join or catch up). A gap left is
// a request this branch of the log has not decided: one on its way (the
// server decides every request it gets, a refusal too), or one decided on a
// branch a takeover cut off, which the member asks again if it still waits
// for it, or else passes with its floor; the list grows while such a gap
// lasts.
func (m *member) markDecided(req, floor uint64) {
	if floor > m.floor {
		m.floor = floor
		// The first entry above the floor (floor+1 would wrap at the top
		// of the range, and keep entries the floor covers, which no
		// snapshot validates).
		i, found := slices.BinarySearch(m.decided, floor)
		if found {
			i++
		}
		m.decided = slices.Delete(m.decided, 0, i)
	}
	if req > m.floor {
		if i, found := slices.BinarySearch(m.decided, req); !found {
			m.decided = slices.Insert(m.decided, i, req)
		}
	}
	for len(m.decided) > 0 && m.decided[0] == m.floor+1 {
		m.floor, m.decided = m.decided[0], m.decided[1:]
	}
}

// shortage says why the state has no room for a request, if it has none.
type shortage int

const (
	room       shortage = iota // there is room
	noSlot                     // the resource is not in use, Limits.MaxResources are
	noTransfer                 // the state could outgrow a state transfer
)

// noRoomFor says why a request for name cannot be decided for want of room,
// if it cannot; the server refuses such a request (serveMsg). There is no
// room when name is not in use and l.MaxResources are, or when deciding it
// could take the state past what a state transfer may carry (l.MaxSnapshot),
// less a reserve: room for every member the group may still admit, at the
// longest address, and a sixteenth of the limit for decided lists, which may
// grow with no request admitted (a withdrawal or a refusal above a request
// of the same member still in flight; refusals carry their floor, which
// passes a gap a takeover left). A state that outgrew a state transfer could
// take in no newcomer, and no member that fell behind could catch up.
func (s *state) noRoomFor(name string, l wire.Limits) shortage {
	need := wire.WaiterBound
	if s.resources[name] == nil {
		if len(s.resources) >= l.MaxResources {
			return noSlot
		}
		need = wire.ResourceBound(len(name))
	}
	need += wire.MemberBound(0, 1) - wire.MemberBound(0, 0) // the request, in its member's decided list
	// A group's size limit is its own (Params), at most the wire's: a
	// forged state's could be anything up to 2^32.
	joins := max(min(int(s.params.MaxMembers), l.MaxMembers)-len(s.members), 0)
	reserve := joins*wire.MemberBound(l.MaxAddr, 0) + l.MaxSnapshot/16
	if s.size+need+reserve > l.MaxSnapshot {
		return noTransfer
	}
	return room
}

// explain says what a shortage means, for an error.
func (s *state) explain(why shortage, l wire.Limits) string {
	if why == noSlot {
		return fmt.Sprintf("%d locks in use (Limits.MaxResources)", len(s.resources))
	}
	waiting := 0
	for _, r := range s.resources {
		waiting += len(r.queue)
	}
	return fmt.Sprintf("%d locks in use and %d requests waiting: one more could make the state too large for a state transfer of %d bytes (Limits.MaxSnapshot)", len(s.resources), waiting, l.MaxSnapshot)
}

// wouldQueue reports whether a request for name made now would wait.
func (s *state) wouldQueue(name string) bool {
	r, ok := s.resources[name]
	return ok && (r.holder != 0 || len(r.queue) > 0)
}

// request applies a Grant decision: the resource goes to the requester if it
// is free, else the requester joins its queue. It returns whether it queued.
func (s *state) request(g *wire.Grant) (queued bool) {
	m := s.member(g.Node)
	if m == nil {
		return g.Queued // a removed member: nothing to record, nothing to contradict
	}
	s.markDecided(m, g.Req, g.Floor)
	r, ok := s.resources[g.Resource]
	if !ok {
		r = &resource{}
		s.resources[g.Resource] = r
		s.size += wire.ResourceBound(len(g.Resource))
	}
	if r.holder == 0 && len(r.queue) == 0 {
		r.holder, r.holderReq, r.token = g.Node, g.Req, g.T
		return false
	}
	r.queue = append(r.queue, wire.Waiter{Node: g.Node, Req: g.Req, Since: g.T})
	s.size += wire.WaiterBound
	return true
}

// releaseMatches reports whether a Released decision fits the state: a
// withdrawal always does (there may be nothing left to withdraw); a release
// must name the holder and its token.
func (s *state) releaseMatches(d *wire.Released) bool {
	if d.Withdrawn {
		return true
	}
	r := s.resources[d.Resource]
	return r != nil && r.holder == d.Node && r.token == d.Token
}

// release applies a Released decision that releaseMatches, and returns the
// new holder if the resource passed on.
func (s *state) release(d *wire.Released) (h handover, passed bool) {
	if m := s.member(d.Node); m != nil {
		s.markDecided(m, d.Req, d.Floor)
	}
	r, ok := s.resources[d.Resource]
	if !ok {
		return handover{}, false
	}
	defer s.dropIfIdle(d.Resource, r)
	if d.Withdrawn {
		s.dequeue(r, func(w wire.Waiter) bool { return w.Node == d.Node && w.Req == d.Req })
		return handover{}, false
	}
	return s.passOn(d.Resource, r, d.T)
}

// snapshot copies the state out for a state transfer.
func (s *state) snapshot() *wire.Snapshot {
	snap := &wire.Snapshot{Instance: s.instance, T: s.t, NextID: s.nextID, Params: s.params,
		Epoch: s.epoch, Backup: s.backup, ViewT: s.viewT, Epochs: slices.Clone(s.epochs)}
	for _, m := range s.members {
		snap.Members = append(snap.Members, wire.MemberState{
			ID: m.id, Inc: m.inc, Addr: m.addr, Silence: m.silence, Floor: m.floor,
			Decided: slices.Clone(m.decided), Observer: m.observer, Transient: m.transient,
		})
	}
	for _, name := range s.resourceNames() {
		r := s.resources[name]
		snap.Resources = append(snap.Resources, wire.ResourceState{
			Name: name, Holder: r.holder, HolderReq: r.holderReq, Token: r.token,
			Queue: slices.Clone(r.queue),
		})
	}
	return snap
}

// stateFromSnapshot rebuilds a state from a validated snapshot.
func stateFromSnapshot(snap *wire.Snapshot) *state {
	s := newState(snap.Instance, snap.Params)
	s.t, s.nextID = snap.T, snap.NextID
	s.epoch, s.backup, s.viewT, s.epochs = snap.Epoch, snap.Backup, snap.ViewT, slices.Clone(snap.Epochs)
	for _, m := range snap.Members {
		mem := &member{
			id: m.ID, inc: m.Inc, addr: m.Addr, silence: m.Silence, floor: m.Floor,
			decided: slices.Clone(m.Decided), observer: m.Observer, transient: m.Transient,
		}
		s.members = append(s.members, mem)
		if s.byInc[m.Inc] == nil {
			s.byInc[m.Inc] = mem // the first, as a scan in ID order would find
		}
	}
	for _, r := range snap.Resources {
		s.resources[r.Name] = &resource{holder: r.Holder, holderReq: r.HolderReq, token: r.Token, queue: slices.Clone(r.Queue)}
	}
	_ = s.rebuildSchedule() // a validated snapshot lists members sorted and unique
	s.size = wire.SnapshotBound(snap)
	return s
}

// digest hashes the whole replicated state in a canonical order (64-bit
// FNV-1a). Two nodes with equal digests at equal T hold the same state.
func (s *state) digest() uint64 {
	var b []byte
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	str := func(v string) { u(uint64(len(v))); b = append(b, v...) }
	u(s.instance)
	u(s.t)
	u(uint64(s.nextID))
	p := s.params
	u(p.TurnLength)
	u(uint64(p.MaxMembers))
	u(p.LeaseTicks)
	u(p.LeaseMarginTicks)
	u(p.TickMicros)
	u(p.TakeoverTicks)
	u(s.epoch)
	u(uint64(s.backup))
	u(s.viewT)
	u(uint64(len(s.epochs)))
	for _, e := range s.epochs {
		u(e.Epoch)
		u(e.T)
	}
	u(uint64(len(s.members)))
	for _, m := range s.members {
		u(uint64(m.id))
		u(m.inc)
		str(m.addr)
		u(m.silence)
		u(m.floor)
		u(uint64(len(m.decided)))
		for _, d := range m.decided {
			u(d)
		}
		u(uint64(btoi(m.observer) | btoi(m.transient)<<1))
	}
	names := s.resourceNames()
	u(uint64(len(names)))
	for _, name := range names {
		r := s.resources[name]
		str(name)
		u(uint64(r.holder))
		u(r.holderReq)
		u(r.token)
		u(uint64(len(r.queue)))
		for _, w := range r.queue {
			u(uint64(w.Node))
			u(w.Req)
			u(w.Since)
		}
	}
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// String renders the state compactly, for test failures.
func (s *state) String() string {
	var sb strings.Builder
	sb.WriteString("members:")
	for _, m := range s.members {
		sb.WriteString(" ")
		sb.WriteString(strconv.FormatUint(uint64(m.id), 10))
		if m.observer {
			sb.WriteString("o")
		}
	}
	for _, name := range s.resourceNames() {
		r := s.resources[name]
		sb.WriteString(" | " + name + "=" + strconv.FormatUint(uint64(r.holder), 10) + " q[")
		for i, w := range r.queue {
			if i > 0 {
				sb.WriteString(",")
			}
			sb.WriteString(strconv.FormatUint(uint64(w.Node), 10))
		}
		sb.WriteString("]")
	}
	return sb.String()
}
