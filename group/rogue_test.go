package group_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/netns"
	"github.com/mcnode/mcnode/seal"
	"github.com/mcnode/mcnode/wire"
)

// A rogue sender on the LAN: it joins the multicast group, reads every
// header (each member's ID, incarnation, T and epochs, the server's too) and
// every decision, and sends well-framed datagrams built with the wire
// package from its own address. It knows no key and cannot send from a
// member's address.
type rogueSender struct {
	t     *testing.T
	tr    *group.UDP
	codec *wire.Codec

	mu       sync.Mutex
	headers  map[wire.NodeID]wire.Header
	addrs    map[wire.NodeID]string
	grants   map[wire.NodeID]*wire.Grant // the last grant of "held" to each member (none with a key)
	got      []wire.Kind                 // what members sent the rogue's own address
	captured [][]byte                    // the last sealed multicasts of the members, as sent
}

func newRogue(t *testing.T, cfg group.Config) *rogueSender {
	t.Helper()
	ifi, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := group.ListenUDP(group.UDPConfig{Group: netip.MustParseAddrPort(cfg.Address), Interface: ifi, Loopback: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	codec, _ := wire.NewCodec(wire.DefaultLimits())
	r := &rogueSender{t: t, tr: tr, codec: codec, headers: map[wire.NodeID]wire.Header{},
		addrs: map[wire.NodeID]string{}, grants: map[wire.NodeID]*wire.Grant{}}
	go r.listen()
	return r
}

func (r *rogueSender) listen() {
	for p := range r.tr.Packets() {
		if p.Source == r.tr.LocalAddr() {
			continue
		}
		if len(p.Data) >= wire.HeaderLen && wire.IsSealed(p.Data) {
			// Sealed: the header is readable, the messages are not.
			h := append([]byte(nil), p.Data[:wire.HeaderLen]...)
			wire.SetSealed(h, false)
			hdr, err := wire.DecodeHeader(h)
			if err != nil || hdr.From == 0 {
				continue
			}
			r.mu.Lock()
			r.headers[hdr.From], r.addrs[hdr.From] = hdr, p.Source
			if !p.Multicast {
				continue
			}
			if r.captured = append(r.captured, p.Data); len(r.captured) > 256 {
				r.captured = r.captured[1:]
			}
			r.mu.Unlock()
			continue
		}
		pkt, err := r.codec.Decode(p.Data)
		if err != nil || pkt.From == 0 {
			continue
		}
		r.mu.Lock()
		r.headers[pkt.From], r.addrs[pkt.From] = pkt.Header, p.Source
		for _, m := range pkt.Messages {
			if g, ok := m.(*wire.Grant); ok && g.Resource == "held" {
				r.grants[g.Node] = g
			}
			if !p.Multicast {
				r.got = append(r.got, m.Kind())
			}
		}
		r.mu.Unlock()
	}
}

// header returns the last header member id sent with.
func (r *rogueSender) header(id wire.NodeID) wire.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.headers[id]
	if !ok {
		r.t.Fatalf("the rogue has seen nothing from node %d", id)
	}
	return h
}

func (r *rogueSender) addr(id wire.NodeID) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addrs[id]
}

// send sends msgs under h, to addr ("" multicasts).
func (r *rogueSender) send(addr string, h wire.Header, msgs ...wire.Message) {
	data, err := r.codec.Pack(h, msgs)
	if err != nil {
		r.t.Fatal(err)
	}
	r.sendRaw(addr, data...)
}

func (r *rogueSender) sendRaw(addr string, data ...[]byte) {
	batch := make([]group.Datagram, len(data))
	for i, d := range data {
		batch[i] = group.Datagram{To: addr, Data: d}
	}
	if err := r.tr.Send(batch); err != nil {
		r.t.Fatal(err)
	}
}

// randomPayloads returns n datagrams behind a valid header h, each with one
// message of a random kind whose body is a msgpack array of random numbers:
// most decode into a message with nonsense in every field.
func randomPayloads(h wire.Header, n int, rng *rand.Rand) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		var body []byte
		fields := 1 + rng.Intn(9)
		body = append(body, 0x90|byte(fields))
		for f := 0; f < fields; f++ {
			switch rng.Intn(3) {
			case 0:
				body = append(body, byte(rng.Intn(128)))
			case 1:
				body = binary.BigEndian.AppendUint64(append(body, 0xcf), rng.Uint64())
			default:
				body = append(body, 0xc3) // true
			}
		}
		d := wire.AppendHeader(nil, h)
		d = append(d, byte(1+rng.Intn(int(wire.KindNotMember))))
		d = binary.AppendUvarint(d, uint64(len(body)))
		out[i] = append(d, body...)
	}
	return out
}

// randomDatagrams returns n datagrams of random bytes, of random lengths
// up to max: no header, nothing of any group.
func randomDatagrams(n, max int, rng *rand.Rand) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, 1+rng.Intn(max))
		rng.Read(out[i])
	}
	return out
}

// sendFlood sends datagrams to the group in batches of 64 a millisecond
// apart: a flood the socket buffers can take.
func (r *rogueSender) sendFlood(data [][]byte) {
	for len(data) > 0 {
		k := min(len(data), 64)
		r.sendRaw("", data[:k]...)
		data = data[k:]
		time.Sleep(time.Millisecond)
	}
}

// sealedKinds opens sealed multicasts with the group's key (which the test
// has, and the rogue has not) and counts the kinds of message they carry.
func sealedKinds(key seal.Key, datagrams [][]byte) map[wire.Kind]int {
	kinds := map[wire.Kind]int{}
	for _, d := range datagrams {
		r, err := seal.NewRing(key) // a ring of its own: no replay window in the way
		if err != nil {
			continue
		}
		plain, err := r.Open(d, seal.Multicast)
		if err != nil {
			continue
		}
		pkt, err := wire.Decode(plain)
		if err != nil {
			continue
		}
		for _, m := range pkt.Messages {
			kinds[m.Kind()]++
		}
	}
	return kinds
}

func sumKinds(kinds map[wire.Kind]int) int {
	n := 0
	for _, k := range kinds {
		n += k
	}
	return n
}

// forgedSnapshot is a state in which nobody holds anything and the rogue
// is a member: installed, it would free the lock in use.
func forgedSnapshot(t *testing.T, h wire.Header, victim group.Member, rogueAddr string) []wire.Message {
	codec, _ := wire.NewCodec(wire.DefaultLimits())
	snap := &wire.Snapshot{Instance: h.Instance, T: h.T + 1000, NextID: victim.ID + 2,
		Params: wire.Params{TurnLength: 64, MaxMembers: 64, LeaseTicks: 1000, LeaseMarginTicks: 100, TickMicros: 1000, TakeoverTicks: 100},
		Epoch:  h.LogEpoch, Epochs: []wire.EpochMark{{Epoch: h.LogEpoch, T: 1}},
		Members: []wire.MemberState{{ID: victim.ID, Inc: victim.Inc, Addr: victim.Addr}, {ID: victim.ID + 1, Inc: 0xbad, Addr: rogueAddr}}}
	data, err := codec.EncodeSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	return []wire.Message{&wire.StateChunk{T: snap.T, Index: 0, Count: 1, Data: data}}
}

// TestRogueSender runs every attack of the hostile-datagram table against
// three nodes over real UDP multicast (in a private network namespace),
// while one member holds a lock the whole time with another queued for it,
// and all three take a second lock in turn. No attack may crash a node,
// give a lock to two holders, stop the grants for longer than grantBound,
// make a member leave, rejoin or suspect its state, or change the view; each
// must be counted under the drop reason it is for (forged, not-member,
// malformed: floods of random messages behind a valid header, and of random
// bytes); and the members agree afterwards.
//
// It runs twice: without a group key, and with one, where the rogue, which
// lacks the key, also replays and tampers with the sealed multicasts it
// captured (once they hold a grant, a release and a SYNC, which the test
// opens with the key to tell), and seals with a key of its own; there every
// attack must be counted by a drop reason of the envelope: unsealed,
// replay, bad-mac, unknown-key (and malformed, for random bytes).
func TestRogueSender(t *testing.T) {
	if !netns.Isolate(t) {
		return
	}
	t.Run("no key", func(t *testing.T) { rogueRun(t, nil, "239.192.77.3:7946") })
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("group key", func(t *testing.T) { rogueRun(t, []seal.Key{key}, "239.192.77.4:7946") })
}

func rogueRun(t *testing.T, keys []seal.Key, address string) {
	const grantBound = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := group.DefaultLocalConfig()
	cfg.Name = "rogue-test"
	cfg.Address = address
	cfg.Keys = keys
	keyed := len(keys) > 0
	gs := joinReal(t, ctx, cfg, 3)
	rogue := newRogue(t, cfg)

	// The lock in use: gs[0] holds "held" throughout; gs[1] waits for it.
	held, err := gs[0].Acquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	var released atomic.Bool
	waiterGot := make(chan error, 1)
	waiterCtx, stopWaiter := context.WithCancel(ctx)
	defer stopWaiter()
	go func() {
		l, err := gs[1].Acquire(waiterCtx, "held")
		if err == nil {
			defer l.Release()
			if !released.Load() {
				err = fmt.Errorf("granted %q (token %d) while its holder still holds it (token %d)", "held", l.Token(), held.Token())
			}
		}
		waiterGot <- err
	}()

	// The grants that must keep flowing: every node takes "r" in turn.
	loop := startLockLoop(t, ctx, gs)
	defer loop.halt()

	st0, err := gs[0].Status()
	if err != nil {
		t.Fatal(err)
	}
	members := st0.Members
	self := func(g *group.Group) group.Member {
		st, _ := g.Status()
		for _, m := range members {
			if m.ID == st.Self {
				return m
			}
		}
		t.Fatal("a node is not in the view")
		return group.Member{}
	}
	holder, waiter := self(gs[0]), self(gs[1])
	server := func() wire.NodeID {
		st, err := gs[0].Status()
		if err != nil {
			t.Fatal(err)
		}
		return st.Server
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(grantBound)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not within %v: %s", grantBound, what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("the rogue has heard every member", func() bool {
		rogue.mu.Lock()
		defer rogue.mu.Unlock()
		return len(rogue.headers) == 3 && (keyed || rogue.grants[holder.ID] != nil)
	})
	// With a key, every attack must be dropped by the envelope (or, no
	// datagram of this wire version at all, as malformed).
	envelope := []string{group.DropUnsealed, group.DropUnknownKey, group.DropBadMAC, group.DropReplay, group.DropMalformed}
	// Without one, by the checks for forgery (not the duplicates and stale
	// copies that ordinary traffic has too).
	hostile := []string{group.DropMalformed, group.DropForged, group.DropNotMember, group.DropNotServer, group.DropUnasked, group.DropBadState}
	// drops sums the members' drop counts by reason.
	drops := func() map[string]uint64 {
		all := map[string]uint64{}
		for _, g := range gs {
			st, err := g.Status()
			if err != nil {
				t.Fatal(err)
			}
			for reason, k := range st.Stats.Drops {
				all[reason] += k
			}
		}
		return all
	}
	dropped := func(all map[string]uint64) uint64 {
		var n uint64
		for reason, k := range all {
			if keyed && slices.Contains(envelope, reason) || !keyed && slices.Contains(hostile, reason) {
				n += k
			}
		}
		return n
	}
	rng := rand.New(rand.NewSource(1))
	// Each attack names the drop reason it must raise without a key; with
	// one, every attack of the unkeyed run is dropped as unsealed, but random
	// bytes, which are no datagram of this wire version.
	type attack struct {
		name string
		drop string
		run  func()
	}
	attacks := []attack{
		{"ok-to-join with a taken ID, in the server's name", group.DropForged, func() {
			h := rogue.header(server())
			rogue.send("", h, &wire.OkToJoin{T: h.T, Next: h.T + 1, Epoch: h.LogEpoch, Inc: 0xbad, ID: holder.ID, Addr: rogue.tr.LocalAddr(), Members: 3})
		}},
		{"ok-to-join with a taken ID, from sender 0", group.DropNotMember, func() {
			h := rogue.header(server())
			h.From, h.Inc = 0, rng.Uint64()
			rogue.send("", h, &wire.OkToJoin{T: h.T, Next: h.T + 1, Epoch: h.LogEpoch, Inc: 0xbad, ID: holder.ID, Addr: rogue.tr.LocalAddr(), Members: 3})
		}},
		{"sync to the last turn that fits in 64 bits", group.DropForged, func() {
			h := rogue.header(server())
			rogue.send("", h, &wire.Sync{T: h.T, Next: math.MaxUint64 - 64, Epoch: h.LogEpoch, Backup: holder.ID})
		}},
		{"sync moving T by a billion", group.DropForged, func() {
			h := rogue.header(server())
			rogue.send("", h, &wire.Sync{T: h.T, Next: h.T + 1e9, Epoch: h.LogEpoch, Backup: holder.ID})
		}},
		{"release in the holder's name", group.DropForged, func() {
			req := uint64(1) // what the rogue cannot read under a key
			rogue.mu.Lock()
			if g := rogue.grants[holder.ID]; g != nil {
				req = g.Req
			}
			rogue.mu.Unlock()
			rogue.send("", rogue.header(holder.ID), &wire.Release{Req: req, Resource: "held", Token: held.Token()})
		}},
		{"left of the holder, in the server's name", group.DropForged, func() {
			h := rogue.header(server())
			rogue.send("", h, &wire.Left{T: h.T, Next: h.T + 1, Epoch: h.LogEpoch, ID: holder.ID})
		}},
		{"left of a member, to that member, in its own name", group.DropForged, func() {
			for _, m := range members {
				h := rogue.header(m.ID)
				rogue.send(m.Addr, h, &wire.Left{T: h.T, Next: h.T + 1, Epoch: h.LogEpoch, ID: m.ID})
			}
		}},
		{"ok-to-join making the rogue a member and the server", group.DropForged, func() {
			h := rogue.header(server())
			rogue.send("", h,
				&wire.OkToJoin{T: h.T, Next: h.T + 1, Epoch: h.LogEpoch, Inc: 0xbad, ID: 9, Addr: rogue.tr.LocalAddr(), Members: 4},
				&wire.Sync{T: h.T + 1, Next: h.T + 64*4, Epoch: h.LogEpoch, Backup: 9})
		}},
		{"state chunks sent unasked to the holder", group.DropForged, func() {
			rogue.send(holder.Addr, rogue.header(server()), forgedSnapshot(t, rogue.header(server()), holder, rogue.tr.LocalAddr())...)
		}},
		{"grant of the held lock to the waiter, from sender 0", group.DropNotMember, func() {
			h := rogue.header(server())
			h.From, h.Inc = 0, rng.Uint64()
			rogue.send("", h, &wire.Grant{T: h.T, Next: h.T + 1, Epoch: h.LogEpoch, Node: waiter.ID, Req: 1, Resource: "held"})
		}},
		{"10,000 random payloads behind a valid header", group.DropMalformed, func() {
			rogue.sendFlood(randomPayloads(rogue.header(server()), 10000, rng))
		}},
		{"10,000 datagrams of random bytes", group.DropMalformed, func() {
			rogue.sendFlood(randomDatagrams(10000, 1400, rng))
		}},
		{"state request from a non-member", group.DropNotMember, func() {
			h := rogue.header(server())
			h.From, h.Inc = 0, rng.Uint64()
			for _, m := range members {
				rogue.send(m.Addr, h, &wire.StateRequest{}, &wire.Nak{From: 1, Count: 64})
			}
		}},
	}
	if keyed {
		for i := range attacks {
			if attacks[i].name != "10,000 datagrams of random bytes" {
				// Random bytes name no group, sealed or not: malformed
				// in either run.
				attacks[i].drop = group.DropUnsealed
			}
		}
		// capture returns the sealed multicasts the rogue captured, once
		// they carry a grant, a release and a SYNC (the test opens them with
		// the key to tell; the rogue cannot).
		capture := func() [][]byte {
			var captured [][]byte
			var kinds map[wire.Kind]int
			waitFor("the rogue captured a grant, a release and a SYNC", func() bool {
				rogue.mu.Lock()
				captured = slices.Clone(rogue.captured)
				rogue.mu.Unlock()
				kinds = sealedKinds(keys[0], captured)
				return kinds[wire.KindGrant] > 0 && kinds[wire.KindRelease] > 0 && kinds[wire.KindSync] > 0
			})
			t.Logf("captured %d sealed multicasts: %d grants, %d releases, %d SYNCs, %d messages in all",
				len(captured), kinds[wire.KindGrant], kinds[wire.KindRelease], kinds[wire.KindSync], sumKinds(kinds))
			return captured
		}
		attacks = append(attacks, []attack{
			{"sealed datagrams captured and replayed", group.DropReplay, func() {
				rogue.sendRaw("", capture()...)
			}},
			// A flipped bit in the ciphertext of a datagram the members took
			// is dropped as a replay (the window is checked first, the tag
			// only for what is fresh); with its sequence number moved ahead
			// too, it is fresh everywhere, and must fail to authenticate.
			{"sealed datagrams captured and altered", group.DropBadMAC, func() {
				for _, d := range capture() {
					d = slices.Clone(d)
					d[len(d)-20] ^= 0x01
					ahead := slices.Clone(d)
					seq := wire.HeaderLen + 4
					binary.BigEndian.PutUint64(ahead[seq:], binary.BigEndian.Uint64(ahead[seq:])+1<<30)
					rogue.sendRaw("", d, ahead)
				}
			}},
			{"sealed multicasts captured and sent to each member directly", group.DropBadMAC, func() {
				captured := capture()
				for _, m := range members {
					rogue.sendRaw(m.Addr, captured...)
				}
			}},
			{"a release sealed with the rogue's own key", group.DropUnknownKey, func() {
				own, _ := seal.GenerateKey()
				data, err := rogue.codec.Pack(rogue.header(holder.ID), []wire.Message{&wire.Release{Req: 1, Resource: "held", Token: held.Token()}})
				if err != nil {
					t.Fatal(err)
				}
				r, err := seal.NewRing(own)
				if err != nil {
					t.Fatal(err)
				}
				sealed, err := r.Seal(nil, data[0], seal.Multicast, 1<<40)
				if err != nil {
					t.Fatal(err)
				}
				rogue.sendRaw("", sealed)
			}},
		}...)
	}
	for _, a := range attacks {
		entered, before := loop.entries.Load(), drops()
		a.run()
		waitFor(a.name+": grants flow on", func() bool { return loop.entries.Load() >= entered+5 })
		waitFor(a.name+": counted as "+a.drop, func() bool { return drops()[a.drop] > before[a.drop] })
		waitFor(a.name+": counted as a drop", func() bool { return dropped(drops()) > dropped(before) })
		select {
		case err := <-waiterGot:
			t.Fatalf("%s: the waiter's Acquire ended: %v", a.name, err)
		default:
		}
		if held.Err() != nil {
			t.Fatalf("%s: the holder lost the lock: %v", a.name, held.Err())
		}
		after := drops()
		var raised []string
		for reason, n := range after {
			if n > before[reason] {
				raised = append(raised, fmt.Sprintf("%s %d", reason, n-before[reason]))
			}
		}
		slices.Sort(raised)
		t.Logf("%s: no effect; drops counted: %s", a.name, strings.Join(raised, ", "))
	}

	// The holder releases at last: the waiter gets the lock.
	released.Store(true)
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiterGot:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(grantBound):
		t.Fatal("the waiter was not granted the lock its holder released")
	}
	loop.halt()
	loop.checkOverlaps(t)
	waitFor("every member agrees", func() bool {
		var sts []group.Status
		for _, g := range gs {
			st, err := g.Status()
			if err != nil {
				t.Fatal(err)
			}
			sts = append(sts, st)
		}
		for _, st := range sts[1:] {
			if st.T != sts[0].T || st.Digest != sts[0].Digest || len(st.Members) != 3 {
				return false
			}
		}
		return true
	})
	for i, g := range gs {
		st, _ := g.Status()
		m := st.Stats.Machine
		if st.Stats.Rejoins != 0 || m.Divergence != 0 || m.Truncated != 0 || m.Snapshots > 1 {
			t.Errorf("node %d was disturbed: %d rejoins, %d divergences, %d truncations, %d state transfers installed",
				i, st.Stats.Rejoins, m.Divergence, m.Truncated, m.Snapshots)
		}
		t.Logf("node %d drops: %v", st.Self, st.Stats.Drops)
	}
	rogue.mu.Lock()
	if slices.Contains(rogue.got, wire.KindStateChunk) {
		t.Error("a member sent its state to the rogue")
	}
	rogue.mu.Unlock()
}

// lockLoop has every node of a group take lock "r" in turn, hold it for a
// millisecond and release it, until halted, and records each critical
// section.
type lockLoop struct {
	entries atomic.Int64
	mu      sync.Mutex
	spans   []interval
	stop    chan struct{}
	halted  sync.Once
	wg      sync.WaitGroup
}

type interval struct{ from, to time.Time }

func startLockLoop(t *testing.T, ctx context.Context, gs []*group.Group) *lockLoop {
	l := &lockLoop{stop: make(chan struct{})}
	for i, g := range gs {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				lease, err := g.Acquire(ctx, "r")
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("node %d: Acquire: %v", i, err)
					}
					return
				}
				from := time.Now()
				time.Sleep(time.Millisecond)
				to := time.Now()
				if lease.Err() != nil {
					t.Errorf("node %d lost r while holding it: %v", i, lease.Err())
				}
				_ = lease.Release()
				l.mu.Lock()
				l.spans = append(l.spans, interval{from, to})
				l.mu.Unlock()
				l.entries.Add(1)
			}
		}()
	}
	return l
}

// halt stops the loops and waits for them; a group that stopped granting
// holds them in Acquire until the context given ends.
func (l *lockLoop) halt() {
	l.halted.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// checkOverlaps fails the test if two critical sections overlapped.
func (l *lockLoop) checkOverlaps(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	slices.SortFunc(l.spans, func(a, b interval) int { return a.from.Compare(b.from) })
	for i := 1; i < len(l.spans); i++ {
		if l.spans[i].from.Before(l.spans[i-1].to) {
			t.Errorf("two holders of r: %v–%v and %v–%v", l.spans[i-1].from, l.spans[i-1].to, l.spans[i].from, l.spans[i].to)
		}
	}
}

// joinReal starts n members of cfg's group on real multicast, closed when
// the test ends.
func joinReal(t *testing.T, ctx context.Context, cfg group.Config, n int) []*group.Group {
	t.Helper()
	var gs []*group.Group
	for i := 0; i < n; i++ {
		g, err := group.Join(ctx, cfg)
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		t.Cleanup(func() { g.Close() })
		gs = append(gs, g)
	}
	return gs
}
