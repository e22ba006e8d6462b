package arbiter_test

import (
	"fmt"
	"testing"

	"github.com/mcnode/mcnode/arbiter"
	"github.com/mcnode/mcnode/internal/simtest"
	"github.com/mcnode/mcnode/wire"
)

// Sinks keep the benchmarks' results alive.
var (
	sinkReady arbiter.Ready
	sinkInt   int
)

// benchBatch is how many requests one timed stretch serves, each for its own
// resource, before the timer stops to release them. The rig's turns are as
// long as the default log window allows (1024 timestamps), so that a turn
// has room for several batches and their releases.
const benchBatch = 64

// benchRig is a two-member group of real nodes, founded and joined in the
// simulation as the tests do, then driven by hand so that a benchmark can
// time one Step at a time. Between timed stretches, pump hands every node's
// output straight to its receivers, with no delay and no loss; a message
// that a timed Step receives goes through the wire codec instead, so that
// the Step gets a freshly decoded copy, as in the runtime.
type benchRig struct {
	s      *simtest.Sim
	codec  *wire.Codec
	names  []string
	events [][32]int // per host, events seen by kind
}

// newBenchRig founds and joins the group in the simulation, as newGroup
// does, and returns once the server role has been handed over once.
func newBenchRig(b *testing.B) *benchRig {
	b.Helper()
	long := func(c *arbiter.Config) { c.Params.TurnLength = uint64(c.LogWindow) }
	s := simtest.New(simtest.Options{Seed: 1, Hosts: 2, Tweak: long})
	joined := func() bool { return s.Hosts[0].Node.Joined() && s.Hosts[1].Node.Joined() }
	if !s.RunUntil(s.Now+200*simtest.SubTicks, joined) {
		b.Fatal("the two hosts did not form a group within 200 ticks")
	}
	s.RunTicks(5)
	for _, v := range s.Check.Violations {
		b.Fatal(v)
	}
	c, err := wire.NewCodec(wire.DefaultLimits())
	if err != nil {
		b.Fatal(err)
	}
	r := &benchRig{s: s, codec: c, events: make([][32]int, len(s.Hosts))}
	for i := range benchBatch {
		r.names = append(r.names, fmt.Sprintf("lock-%d", i+1))
	}
	r.pump(b)
	// The founder's first turn began where the group did, off the turn
	// boundaries, and counts its decisions from there: it may end before
	// the room that roles computes from T runs out. Every turn after the
	// first hand-over starts on a boundary.
	first := server(r.s)
	for range 500 {
		if srv := server(r.s); srv != nil && srv != first {
			return r
		}
		r.tick(b)
	}
	b.Fatal("no turn hand-over within 500 ticks")
	return nil
}

// wireCopy sends msgs through the codec: what a receiver would decode.
func (r *benchRig) wireCopy(b *testing.B, h wire.Header, msgs []wire.Message) []wire.Message {
	b.Helper()
	dgrams, err := r.codec.Pack(h, msgs)
	if err != nil {
		b.Fatal(err)
	}
	var out []wire.Message
	for _, d := range dgrams {
		p, err := r.codec.Decode(d)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, p.Messages...)
	}
	return out
}

// deliver hands one Ready of host from to every host it addresses.
func (r *benchRig) deliver(b *testing.B, from *simtest.Host, rd arbiter.Ready) {
	for _, o := range rd.Messages {
		for _, to := range r.s.Hosts {
			if to == from || (o.Addr != "" && o.Addr != to.Addr) {
				continue
			}
			if err := to.Node.Step(from.Addr, rd.Header, o.Msg); err != nil {
				b.Fatalf("h%d stepping %s from h%d: %v", to.Index, o.Msg.Kind(), from.Index, err)
			}
		}
	}
	r.record(b, from, rd.Events)
}

// record counts a host's events; one that means the group broke fails the
// benchmark.
func (r *benchRig) record(b *testing.B, h *simtest.Host, events []arbiter.Event) {
	for _, e := range events {
		switch e.Kind {
		case arbiter.EventLost, arbiter.EventRemoved, arbiter.EventLeft, arbiter.EventMemberRemoved:
			b.Fatalf("h%d: %s %s", h.Index, e.Kind, e.Reason)
		}
		r.events[h.Index][e.Kind]++
	}
}

// pump delivers until no node has anything to send.
func (r *benchRig) pump(b *testing.B) {
	for round := 0; ; round++ {
		if round > 1000 {
			b.Fatal("the nodes keep talking: no quiet after 1000 rounds")
		}
		moved := false
		for _, h := range r.s.Hosts {
			if h.Node.HasReady() {
				moved = true
				rd := h.Node.Ready()
				h.Node.Advance()
				r.deliver(b, h, rd)
			}
		}
		if !moved {
			return
		}
	}
}

// tick advances every node by one tick and delivers what that produced.
func (r *benchRig) tick(b *testing.B) {
	for _, h := range r.s.Hosts {
		h.Node.Tick()
	}
	r.pump(b)
}

// roles ticks until some node is server with room in its turn for a batch
// of grants, and returns it and the other node.
func (r *benchRig) roles(b *testing.B) (srv, mem *simtest.Host) {
	b.Helper()
	for range 500 {
		if srv = server(r.s); srv != nil {
			l := srv.Node.Params().TurnLength
			if room := l - 1 - srv.Node.T()%l; room >= benchBatch {
				mem = r.s.Hosts[1-srv.Index]
				return srv, mem
			}
		}
		r.tick(b)
	}
	b.Fatal("no server with room for a batch within 500 ticks")
	return nil, nil
}

// requests has mem ask for every resource of the batch and returns its
// Request messages as the server would decode them, undelivered.
func (r *benchRig) requests(b *testing.B, mem *simtest.Host) (wire.Header, []wire.Message) {
	b.Helper()
	for _, name := range r.names {
		if _, err := mem.Node.Acquire(name); err != nil {
			b.Fatalf("h%d Acquire(%q): %v", mem.Index, name, err)
		}
	}
	rd := mem.Node.Ready()
	mem.Node.Advance()
	var msgs []wire.Message
	for _, o := range rd.Messages {
		if o.Msg.Kind() != wire.KindRequest || o.Addr != "" {
			b.Fatalf("h%d sent %s to %q while asking", mem.Index, o.Msg.Kind(), o.Addr)
		}
		msgs = append(msgs, o.Msg)
	}
	if len(msgs) != benchBatch {
		b.Fatalf("%d requests for %d resources", len(msgs), benchBatch)
	}
	r.record(b, mem, rd.Events)
	return rd.Header, r.wireCopy(b, rd.Header, msgs)
}

// releaseAll has mem, which holds the whole batch, release it, and runs the
// group until every release is decided and mem has heard so.
func (r *benchRig) releaseAll(b *testing.B, mem *simtest.Host) {
	b.Helper()
	r.pump(b)
	if !holds(mem, r.names[0]) || !holds(mem, r.names[benchBatch-1]) {
		b.Fatalf("h%d does not hold the batch after its grants: %+v", mem.Index, mem.Node.Held())
	}
	for _, name := range r.names {
		if err := mem.Node.Release(name); err != nil {
			b.Fatal(err)
		}
	}
	want := r.events[mem.Index][arbiter.EventReleased] + benchBatch
	for range 200 {
		r.pump(b)
		if r.events[mem.Index][arbiter.EventReleased] >= want {
			// A server holds back a release nobody waits on until its
			// next ping: wait them out, so that the next batch's first
			// grant does not carry them.
			for range arbiter.DefaultConfig().HeartbeatTicks {
				r.tick(b)
			}
			return
		}
		r.tick(b)
	}
	b.Fatalf("h%d: releases not decided within 200 ticks", mem.Index)
}

// BenchmarkServerGrant times the server's side of a request. One op is the
// server's Step of a member's Request for a free resource (decoded off the
// wire), which grants it, and the Ready and Advance that take the Grant
// decision to send. The releases between batches are untimed.
func BenchmarkServerGrant(b *testing.B) {
	r := newBenchRig(b)
	rds := make([]arbiter.Ready, 0, benchBatch)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		srv, mem := r.roles(b)
		h, reqs := r.requests(b, mem)
		n := min(benchBatch, b.N-done)
		rds = rds[:0]
		b.StartTimer()
		for _, m := range reqs[:n] {
			if err := srv.Node.Step(mem.Addr, h, m); err != nil {
				b.Fatal(err)
			}
			rd := srv.Node.Ready()
			srv.Node.Advance()
			rds = append(rds, rd)
		}
		b.StopTimer()
		done += n
		for i, rd := range rds {
			if !grants(rd, mem.Node.ID(), reqs[i].(*wire.Request).Req) {
				b.Fatalf("the server's answer to request %d is no grant: %+v", i, rd.Messages)
			}
			r.deliver(b, srv, rd)
			sinkReady = rd
		}
		// A partial last batch: the remaining requests are decided too.
		for _, m := range reqs[n:] {
			if err := srv.Node.Step(mem.Addr, h, m); err != nil {
				b.Fatal(err)
			}
		}
		r.releaseAll(b, mem)
		b.StartTimer()
	}
}

// grants reports whether rd carries exactly one message, a multicast grant
// (not a queuing) of request req of node id.
func grants(rd arbiter.Ready, id wire.NodeID, req uint64) bool {
	if len(rd.Messages) != 1 || rd.Messages[0].Addr != "" {
		return false
	}
	g, ok := rd.Messages[0].Msg.(*wire.Grant)
	return ok && g.Node == id && g.Req == req && !g.Queued
}

// BenchmarkMemberApplyGrant times a member receiving the decision on its own
// request. One op is the member's Step of the server's Grant decision
// (decoded off the wire), which applies it to the replicated state and
// reports EventGranted, and the Ready and Advance that take the event. The
// requests and releases between batches are untimed.
func BenchmarkMemberApplyGrant(b *testing.B) {
	r := newBenchRig(b)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		srv, mem := r.roles(b)
		h, reqs := r.requests(b, mem)
		for _, m := range reqs {
			if err := srv.Node.Step(mem.Addr, h, m); err != nil {
				b.Fatal(err)
			}
		}
		rd := srv.Node.Ready()
		srv.Node.Advance()
		var decisions []wire.Message
		for _, o := range rd.Messages {
			if o.Msg.Kind() != wire.KindGrant {
				b.Fatalf("the server sent %s among its grants", o.Msg.Kind())
			}
			decisions = append(decisions, o.Msg)
		}
		if len(decisions) != benchBatch {
			b.Fatalf("%d grants for %d requests", len(decisions), benchBatch)
		}
		decisions = r.wireCopy(b, rd.Header, decisions)
		n := min(benchBatch, b.N-done)
		granted := 0
		b.StartTimer()
		for _, d := range decisions[:n] {
			if err := mem.Node.Step(srv.Addr, rd.Header, d); err != nil {
				b.Fatal(err)
			}
			mrd := mem.Node.Ready()
			mem.Node.Advance()
			for _, e := range mrd.Events {
				if e.Kind == arbiter.EventGranted {
					granted++
				}
			}
			sinkReady = mrd
		}
		b.StopTimer()
		done += n
		if granted != n {
			b.Fatalf("%d grants applied, %d reported", n, granted)
		}
		sinkInt = granted
		for _, d := range decisions[n:] {
			if err := mem.Node.Step(srv.Addr, rd.Header, d); err != nil {
				b.Fatal(err)
			}
		}
		r.releaseAll(b, mem)
		b.StartTimer()
	}
}
