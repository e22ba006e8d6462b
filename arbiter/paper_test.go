package arbiter_test

// Scenario tests named after the sections of Pearlin's thesis (Boston
// College, 2003).
// Each drives a group in the deterministic simulation and checks what the
// section says, on top of the invariants the harness checks after every
// delivery (mutual exclusion, one decision per T made by the server for that
// T, FIFO grants, at most one server).

import (
	"os"
	"slices"
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/clock"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

// traceTo returns a trace sink that logs to the test, with MCNODE_TRACE=1.
func traceTo(t *testing.T) func(string) {
	if os.Getenv("MCNODE_TRACE") == "" {
		return nil
	}
	return func(l string) { t.Log(l) }
}

// newGroup starts a loss-free group of n hosts and waits until all joined.
func newGroup(t *testing.T, n int, seed int64, tweak func(*arbiter.Config)) *simtest.Sim {
	t.Helper()
	s := simtest.New(simtest.Options{Seed: seed, Hosts: n, Tweak: tweak, Trace: traceTo(t)})
	waitUntil(t, s, 200, "every host joined", func() bool {
		for _, h := range s.Hosts {
			if !h.Node.Joined() {
				return false
			}
		}
		return true
	})
	return s
}

func waitUntil(t *testing.T, s *simtest.Sim, ticks int, what string, cond func() bool) {
	t.Helper()
	if !s.RunUntil(s.Now+int64(ticks)*simtest.SubTicks, cond) {
		t.Fatalf("tick %d: not within %d ticks: %s", s.Tick(), ticks, what)
	}
}

func checkClean(t *testing.T, s *simtest.Sim) {
	t.Helper()
	for _, v := range s.Check.Violations {
		t.Error(v)
	}
	for _, h := range s.Hosts {
		if d := h.Node.Stats().Divergence; d > 0 {
			t.Errorf("h%d: %d divergences", h.Index, d)
		}
	}
}

func hostOf(s *simtest.Sim, id wire.NodeID) *simtest.Host {
	for _, h := range s.Hosts {
		if h.Alive && h.Node.ID() == id && !h.Node.Stopped() {
			return h
		}
	}
	return nil
}

func server(s *simtest.Sim) *simtest.Host {
	for _, h := range s.Hosts {
		if h.Alive && h.Node.IsServer() {
			return h
		}
	}
	return nil
}

func decisions[D wire.Decision](s *simtest.Sim) []D {
	var out []D
	for _, d := range s.Check.Log() {
		if x, ok := d.Decision.(D); ok {
			out = append(out, x)
		}
	}
	return out
}

func hasEvent(h *simtest.Host, kind arbiter.EventKind) bool {
	return slices.ContainsFunc(h.Events, func(e arbiter.Event) bool { return e.Kind == kind })
}

func acquire(t *testing.T, s *simtest.Sim, h *simtest.Host, resource string) {
	t.Helper()
	req, err := h.Node.Acquire(resource)
	if err != nil {
		t.Fatalf("h%d Acquire(%q): %v", h.Index, resource, err)
	}
	s.Check.Acquired(h, req)
	s.Flush(h)
}

func holds(h *simtest.Host, resource string) bool {
	return slices.ContainsFunc(h.Node.Held(), func(x arbiter.Held) bool { return x.Resource == resource })
}

func maxMembers(n uint32) func(*arbiter.Config) {
	return func(c *arbiter.Config) { c.Params.MaxMembers = n }
}

// Section 3.2: a newcomer multicasts its join request; the server alone
// decides OK_TO_JOIN, with a logical ID given in join order and the number of
// members; every member then greets the newcomer directly, and the newcomer
// is a member only once every member has greeted it; it gets the replicated
// state by state transfer.
func TestSection32JoinFlow(t *testing.T) {
	const n = 4
	greetedBy := map[int]map[wire.NodeID]bool{}
	s := simtest.New(simtest.Options{Seed: 7, Hosts: n})
	s.Opt.Delivered = func(d *simtest.Datagram) {
		to := s.Hosts[d.To]
		if d.Has(wire.KindGreeting) && !to.Node.Joined() {
			if greetedBy[d.To] == nil {
				greetedBy[d.To] = map[wire.NodeID]bool{}
			}
			greetedBy[d.To][d.Packet.From] = true
		}
	}
	waitUntil(t, s, 200, "all joined", func() bool {
		return !slices.ContainsFunc(s.Hosts, func(h *simtest.Host) bool { return !h.Node.Joined() })
	})
	oks := decisions[*wire.OkToJoin](s)
	if len(oks) != n-1 {
		t.Fatalf("%d OK_TO_JOIN decisions, want %d", len(oks), n-1)
	}
	for i, ok := range oks {
		if want := wire.NodeID(i + 2); ok.ID != want || ok.Members != uint32(want) {
			t.Errorf("OK_TO_JOIN #%d gave ID %d with %d members, want ID %d, %d members (IDs in join order)", i, ok.ID, ok.Members, want, want)
		}
	}
	for _, d := range s.Check.Log() {
		if d.Kind() == wire.KindOkToJoin && d.By != s.Hosts[0].Node.ID() && hostOf(s, d.By) == nil {
			t.Errorf("OK_TO_JOIN made by %d, not a member", d.By)
		}
	}
	for _, h := range s.Hosts[1:] {
		if !h.Node.HasState() || h.Node.Stats().Snapshots == 0 {
			t.Errorf("h%d became a member without a state transfer", h.Index)
		}
		for _, m := range h.Node.Members() {
			if m.ID < h.Node.ID() && !greetedBy[h.Index][m.ID] {
				t.Errorf("h%d (node %d) became a member without a greeting from node %d", h.Index, h.Node.ID(), m.ID)
			}
		}
	}
	checkClean(t, s)
}

// A newcomer whose greeting from one member is lost has the state but is not
// a member until it asks again and that member greets it.
func TestSection32MemberOnlyAfterEveryGreeting(t *testing.T) {
	// Host 3 stays off the network until hosts 0..2 have formed the group;
	// then it joins, and node 2's greeting to it is lost for a while.
	offline, block := true, true
	s := simtest.New(simtest.Options{Seed: 3, Hosts: 4, Drop: func(d *simtest.Datagram) bool {
		return (offline && (d.From == 3 || d.To == 3)) ||
			(block && d.To == 3 && d.Packet.From == 2 && d.Has(wire.KindGreeting))
	}})
	s.RunTicks(60)
	if s.Hosts[3].Node.ID() != 0 {
		t.Fatal("host 3 was admitted while off the network")
	}
	offline = false
	h := s.Hosts[3]
	waitUntil(t, s, 100, "newcomer has the state", func() bool { return h.Node.HasState() })
	s.RunTicks(60)
	if h.Node.Joined() {
		t.Fatal("newcomer became a member without node 2's greeting")
	}
	block = false
	waitUntil(t, s, 3*arbiter.DefaultConfig().JoinRetryTicks, "newcomer joined once greeted", h.Node.Joined)
	checkClean(t, s)
}

// Section 3.2 / figure C: with no open spot the server answers GROUP_FULL, a
// decision like any other, and the refused node stops.
func TestSection32GroupFull(t *testing.T) {
	s := simtest.New(simtest.Options{Seed: 11, Hosts: 4, Tweak: maxMembers(3)})
	s.RunTicks(100)
	var full, joined int
	for _, h := range s.Hosts {
		switch {
		case hasEvent(h, arbiter.EventGroupFull):
			full++
			if !h.Node.Stopped() {
				t.Errorf("h%d was refused but did not stop", h.Index)
			}
		case h.Node.Joined():
			joined++
		}
	}
	if full != 1 || joined != 3 {
		t.Fatalf("%d refused, %d joined; want 1 and 3", full, joined)
	}
	if got := decisions[*wire.GroupFull](s); len(got) != 1 || got[0].Max != 3 {
		t.Fatalf("GROUP_FULL decisions: %+v", got)
	}
	checkClean(t, s)
}

// Figure C, request_to_leave, in the middle of a turn: the server records the
// leave as a decision and keeps its turn; the leaver's resource goes to the
// head of the queue.
func TestSection32LeaveMidTurn(t *testing.T) {
	s := newGroup(t, 3, 5, nil)
	srv := server(s)
	var others []*simtest.Host
	for _, h := range s.Hosts {
		if h != srv {
			others = append(others, h)
		}
	}
	leaver, waiter := others[0], others[1]
	acquire(t, s, leaver, "r")
	waitUntil(t, s, 20, "leaver holds r", func() bool { return holds(leaver, "r") })
	acquire(t, s, waiter, "r")
	s.RunTicks(5)
	srv = server(s)
	if srv == nil {
		t.Fatal("no server")
	}
	if err := leaver.Node.Leave(); err != nil {
		t.Fatal(err)
	}
	if holds(leaver, "r") {
		t.Fatal("the leaver still holds r after Leave")
	}
	waitUntil(t, s, 30, "waiter granted r", func() bool { return holds(waiter, "r") })
	lefts := decisions[*wire.Left](s)
	if len(lefts) != 1 || lefts[0].ID != leaver.Node.ID() {
		t.Fatalf("Left decisions: %+v", lefts)
	}
	waitUntil(t, s, 20, "the leaver learns it left", func() bool { return hasEvent(leaver, arbiter.EventLeft) && leaver.Node.Stopped() })
	tok := waiter.Node.Held()[0].Token
	if tok != lefts[0].T {
		t.Fatalf("waiter's token %d, want the Left decision's T %d", tok, lefts[0].T)
	}
	// The leave did not move the server role: its Next is the same server's.
	view := []wire.NodeID{}
	for _, m := range waiter.Node.Members() {
		view = append(view, m.ID)
	}
	sched, _ := clock.NewSchedule(view, waiter.Node.Params().TurnLength)
	if by, _ := sched.ServerAt(lefts[0].Next); by != logDecider(s, lefts[0].T) {
		t.Fatalf("after the leave the server is node %d, the decider was node %d", by, logDecider(s, lefts[0].T))
	}
	checkClean(t, s)
}

func logDecider(s *simtest.Sim, t uint64) wire.NodeID {
	for _, d := range s.Check.Log() {
		if x, _ := d.Stamp(); x == t {
			return d.By
		}
	}
	return 0
}

// A leaving server first hands its turn over (SYNC), then leaves as a member.
func TestSection32ServerLeaves(t *testing.T) {
	s := newGroup(t, 3, 9, nil)
	srv := server(s)
	id := srv.Node.ID()
	if err := srv.Node.Leave(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, s, 100, "server left", srv.Node.Stopped)
	lefts := decisions[*wire.Left](s)
	if len(lefts) != 1 || lefts[0].ID != id || logDecider(s, lefts[0].T) == id {
		t.Fatalf("the server's leave should be decided by its successor: %+v", lefts)
	}
	if server(s) == nil {
		waitUntil(t, s, 20, "a server", func() bool { return server(s) != nil })
	}
	checkClean(t, s)
}

// Section 3.3: the race where the server, on the last timestamp of its turn,
// answers a request of the next server, and the next server, seeing the
// incremented T, takes the role too early. Here the last timestamp of a turn
// is taken only by the SYNC: with turns of two timestamps, every other
// decision hands over, and requests from the next server reach the server at
// its last slot again and again. None is answered there; each is granted
// later, by a server for its T.
func TestSection33NoResponseOnTheLastTimestamp(t *testing.T) {
	s := newGroup(t, 3, 13, func(c *arbiter.Config) { c.Params.TurnLength = 2 })
	raced := 0
	s.Opt.Delivered = func(d *simtest.Datagram) {
		to := s.Hosts[d.To]
		next := to.Node.Backup()
		if to.Node.IsServer() && d.Has(wire.KindRequest) && to.Node.T()%2 == 1 && d.Packet.From == next {
			raced++
		}
	}
	w := simtest.NewWorkload(s, 1)
	w.ThinkMax, w.HoldMax = 1, 1
	w.Run(600)
	w.Stopped = true
	if !w.RunUntil(s.Now+200*simtest.SubTicks, func() bool { return len(s.Check.Outstanding()) == 0 }) {
		t.Fatalf("requests not granted: %v", s.Check.Outstanding())
	}
	if raced == 0 {
		t.Fatal("no request of the next server reached the server at its last timestamp: the race was not exercised")
	}
	for _, d := range s.Check.Log() {
		if tt, _ := d.Stamp(); tt%2 == 1 && d.Kind() != wire.KindSync {
			t.Fatalf("T=%d, a turn's last timestamp, went to %s", tt, d.Kind())
		}
	}
	t.Logf("%d requests of the next server arrived at the server's last timestamp; %d entries", raced, s.Stats.Entries)
	checkClean(t, s)
}

// successor waits until there is a server and returns it and its backup,
// the member its turn goes to.
// otherThan returns a host that is none of those given.
func otherThan(s *simtest.Sim, not ...*simtest.Host) *simtest.Host {
	for _, h := range s.Hosts {
		if !slices.Contains(not, h) {
			return h
		}
	}
	return nil
}

func successor(t *testing.T, s *simtest.Sim) (srv, next *simtest.Host) {
	t.Helper()
	waitUntil(t, s, 100, "a server with a backup", func() bool {
		srv = server(s)
		if srv == nil {
			return false
		}
		next = hostOf(s, srv.Node.Backup())
		return next != nil && next != srv
	})
	return srv, next
}

// Section 4.2: the SYNC to the next server is lost. Nobody is server for a
// while; the next packet from a node with the new T carries it to the next
// server, which asks for the decisions it missed and takes its turn.

func TestSection42LostSyncRecovered(t *testing.T) {
	s := newGroup(t, 3, 17, nil)
	srv, nx := successor(t, s)
	third := otherThan(s, srv, nx)
	lost := 0
	s.Opt.Drop = func(d *simtest.Datagram) bool {
		if d.From == srv.Index && d.To == nx.Index && d.Has(wire.KindSync) {
			lost++
			return true
		}
		return false
	}
	waitUntil(t, s, 100, "the server hands over", func() bool { return !srv.Node.IsServer() })
	s.RunTicks(2)
	if nx.Node.IsServer() || nx.Node.T() >= srv.Node.T() {
		t.Fatal("the next server got the SYNC although it was dropped")
	}
	nak := nx.Node.Stats().NaksSent
	// The third node's request carries the new T to the next server.
	acquire(t, s, third, "r")
	waitUntil(t, s, 30, "next server takes its turn", nx.Node.IsServer)
	waitUntil(t, s, 30, "request granted", func() bool { return holds(third, "r") })
	if lost == 0 || nx.Node.Stats().NaksSent == nak {
		t.Fatalf("recovery not by the paper's path: %d SYNC copies dropped, NAKs %d → %d", lost, nak, nx.Node.Stats().NaksSent)
	}
	checkClean(t, s)
}

// The same loss in an idle group, every copy of the SYNC to the next server
// lost: no request comes to carry the new T. The paper's group would stay
// without a server; here nobody pings for the takeover timeout, the next
// server (the backup) asks for a takeover, catches up from its voters, finds
// itself the server of its own log, and takes over at once.
func TestSection42LostSyncIdleGroup(t *testing.T) {
	s := newGroup(t, 3, 19, nil)
	srv, nx := successor(t, s)
	s.Opt.Drop = func(d *simtest.Datagram) bool {
		return d.From == srv.Index && d.To == nx.Index && d.Has(wire.KindSync)
	}
	waitUntil(t, s, 100, "the server hands over", func() bool { return !srv.Node.IsServer() })
	cfg := arbiter.DefaultConfig()
	waitUntil(t, s, int(cfg.Params.TakeoverTicks)+2*cfg.ClaimTicks, "next server takes its turn in an idle group", nx.Node.IsServer)
	if nx.Node.Frozen() {
		t.Fatal("the backup took over but waits out leases: it held every decision")
	}
	checkClean(t, s)
}

// Section 4.2, last paragraph: a member dies holding a resource; the server
// reclaims it at the end of a turn and the next in line gets it. Here the
// reclaim waits until the dead member's lease has certainly run out.
func TestSection42DeadHolderReclaimed(t *testing.T) {
	s := newGroup(t, 4, 23, nil)
	srv := server(s)
	var holder, waiter *simtest.Host
	for _, h := range s.Hosts {
		switch {
		case h == srv:
		case holder == nil:
			holder = h
		case waiter == nil:
			waiter = h
		}
	}
	acquire(t, s, holder, "r")
	waitUntil(t, s, 20, "holder holds r", func() bool { return holds(holder, "r") })
	acquire(t, s, waiter, "r")
	s.RunTicks(3)
	dead := holder.Node.ID()
	s.Crash(holder.Index)
	crashed := s.Tick()
	cfg := arbiter.DefaultConfig()
	p := cfg.Params
	bound := int(p.LeaseTicks+p.LeaseMarginTicks) + 2*cfg.TurnTicks + cfg.PingTimeoutTicks
	waitUntil(t, s, bound, "waiter granted the dead holder's resource", func() bool { return holds(waiter, "r") })
	tok := waiter.Node.Held()[0].Token
	var reclaim *wire.Sync
	for _, d := range decisions[*wire.Sync](s) {
		if d.T == tok {
			reclaim = d
		}
	}
	if reclaim == nil || reclaim.Remove != dead {
		t.Fatalf("the grant (token %d) was not made by a SYNC removing node %d: %+v", tok, dead, reclaim)
	}
	t.Logf("reclaimed %d ticks after the crash (lease %d + margin %d)", s.Tick()-crashed, p.LeaseTicks, p.LeaseMarginTicks)
	waitUntil(t, s, 20, "every member told of the removal", func() bool {
		for _, h := range s.Hosts {
			if h.Alive && !hasEvent(h, arbiter.EventMemberRemoved) {
				return false
			}
		}
		return true
	})
	checkClean(t, s)
}

// Figure B: the turn skips a member that does not answer. Members in ID
// order: S (server), X (its backup, the next server), Y, Z. Y dies now.
// Either S already found Y silent and named Z to back X up, or it named Y and
// X, finding its backup gone, names another by a new epoch: either way the
// turn goes on to Z and never to Y, and a SYNC lists Y as unheard.
func TestFigureBDeadNextServerSkipped(t *testing.T) {
	s := newGroup(t, 4, 29, nil)
	cur, x := successor(t, s)
	members := cur.Node.Members()
	i := slices.IndexFunc(members, func(m arbiter.MemberInfo) bool { return m.ID == x.Node.ID() })
	skipped := members[(i+1)%len(members)].ID
	after := hostOf(s, members[(i+2)%len(members)].ID)
	dead := hostOf(s, skipped)
	s.Crash(dead.Index)
	crashedAt := len(s.Check.Log())
	waitUntil(t, s, 300, "the turn reaches Z", after.Node.IsServer)
	for _, d := range s.Check.Log()[crashedAt:] {
		if d.By == skipped {
			t.Fatalf("dead node %d made a decision after it died: %s", skipped, d.Kind())
		}
	}
	unheard := false
	for _, d := range decisions[*wire.Sync](s) {
		unheard = unheard || slices.ContainsFunc(d.Unheard, func(u wire.Silence) bool { return u.ID == skipped })
	}
	if !unheard {
		t.Fatalf("no SYNC lists dead node %d as unheard", skipped)
	}
	checkClean(t, s)
}

// Beyond the paper: SYNC carries a digest of the replicated state. A member
// whose state has gone wrong notices at the next SYNC, fetches the state
// again, and agrees with the group after.
func TestSyncDigestCatchesDivergence(t *testing.T) {
	s := newGroup(t, 3, 31, nil)
	var victim *simtest.Host
	for _, h := range s.Hosts {
		if !h.Node.IsServer() {
			victim = h
			break
		}
	}
	arbiter.CorruptStateForTest(victim.Node)
	waitUntil(t, s, 150, "divergence detected and repaired", func() bool {
		return victim.Node.Stats().Divergence > 0 && victim.Node.Stats().Snapshots > 1
	})
	waitUntil(t, s, 150, "states agree", func() bool {
		for _, h := range s.Hosts {
			if h.Node.T() != victim.Node.T() || h.Node.Digest() != victim.Node.Digest() {
				return false
			}
		}
		return true
	})
	for _, v := range s.Check.Violations {
		t.Error(v)
	}
}
