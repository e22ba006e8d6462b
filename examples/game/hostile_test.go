package game

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcnode/mcnode"
)

// The review's cases: what another player, a lossy network or a paused
// process can do to a player, each a regression test.

// rawState is one "state" message of another player, as it would arrive.
func rawState(name string, x, y, round int) []byte {
	b, _ := json.Marshal(message{Type: "state", State: &State{Name: name, X: x, Y: y, Round: round, Health: MaxHealth}})
	return b
}

func raw(m message) []byte {
	b, _ := json.Marshal(m)
	return b
}

// A flood of players, one on every cell, must not make the spawner spin
// (it held the lock the screen, the tick and Stop need).
func TestManyPlayersDoNotStallTheSpawner(t *testing.T) {
	quick(t)
	nodes := startNodes(t, mcnode.Multicast, 1)
	p := must(New(nodes[0], Config{Name: "me", Seed: 1}))
	for y := range Height {
		for x := range Width {
			p.receive(uint64(1000+y*Width+x), rawState(fmt.Sprintf("h%d.%d", x, y), x, y, 1))
		}
	}
	if n := len(p.Snapshot().Others); n > MaxPlayers {
		t.Errorf("%d players kept, want at most %d", n, MaxPlayers)
	}
	p.Start()
	time.Sleep(time.Second)
	done := make(chan struct{})
	go func() {
		p.Stop(0)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop blocked for 5 s: the spawner stalls the player")
	}
}

// Rounds far ahead, wins below the target, wins for players nobody knows,
// or from a node that does not speak for them, change nothing.
func TestForgedWinsAndRounds(t *testing.T) {
	nodes := startNodes(t, mcnode.Multicast, 1)
	p := must(New(nodes[0], Config{Name: "me", Watch: true, Target: 50}))
	p.receive(5, rawState("evil", 1, 1, 1))
	for _, m := range []message{
		{Type: "win", Win: &Win{Round: math.MaxInt, Player: "evil", Score: 100}},
		{Type: "win", Win: &Win{Round: 1, Player: "evil", Score: 0}},
		{Type: "win", Win: &Win{Round: 1, Player: "nobody", Score: 100}},
		{Type: "state", State: &State{Name: "evil", Round: 1 << 20}},
		{Type: "spawn", Round: 40},
	} {
		p.receive(5, raw(m))
	}
	p.receive(6, raw(message{Type: "win", Win: &Win{Round: 1, Player: "evil", Score: 100}})) // not evil's node
	if s := p.Snapshot(); s.Round != 1 || len(s.Wins) != 0 {
		t.Errorf("forged wins and rounds moved the player to round %d, wins %+v", s.Round, s.Wins)
	}
	// The real thing is taken (the check can pass).
	p.receive(5, raw(message{Type: "win", Win: &Win{Round: 1, Player: "evil", Score: 60}}))
	if s := p.Snapshot(); s.Round != 2 || len(s.Wins) != 1 {
		t.Errorf("a sound win: round %d, wins %+v", s.Round, s.Wins)
	}
}

// Names that are too long, that would garble the screen or reach the
// terminal as control sequences, are refused: by New, and on the wire.
func TestNames(t *testing.T) {
	nodes := startNodes(t, mcnode.Multicast, 1)
	for _, name := range []string{"", strings.Repeat("x", MaxName+1), "evil\n", "界", "\x1b]0;owned\x07x", "a b"} {
		if _, err := New(nodes[0], Config{Name: name}); !errors.Is(err, ErrName) {
			t.Errorf("New(%q): %v, want ErrName", name, err)
		}
	}
	p := must(New(nodes[0], Config{Name: "me", Watch: true}))
	p.receive(5, rawState("evil\n", 5, 5, 1))
	p.receive(6, rawState("界", 7, 7, 1))
	p.receive(7, rawState("\x1b]0;owned\x07x", 5, 5, 1))
	if s := p.Snapshot(); len(s.Others) != 0 {
		t.Errorf("hostile names taken: %+v", s.Others)
	}
	u := NewUI(p, make(chan Event))
	if lines := strings.Split(u.arena(p.Snapshot()), "\n"); len(lines) != Height+2 {
		t.Errorf("the arena is %d lines, want %d", len(lines), Height+2)
	}
}

// Two players of one name: each is told, and the others keep the first.
func TestNameClash(t *testing.T) {
	nodes := startNodes(t, mcnode.Multicast, 1)
	var mu sync.Mutex
	var clashes int
	p := must(New(nodes[0], Config{Name: "bob", Watch: true, OnEvent: func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.Kind == "clash" {
			clashes++
		}
	}}))
	p.receive(5, rawState("bob", 1, 1, 1))
	p.receive(5, rawState("bob", 2, 1, 1))
	p.receive(5, rawState("ann", 3, 3, 1))
	p.receive(6, rawState("ann", 9, 9, 1)) // another node claims ann
	mu.Lock()
	defer mu.Unlock()
	if clashes != 1 {
		t.Errorf("%d clash events, want 1", clashes)
	}
	if s := p.Snapshot(); len(s.Others) != 1 || s.Others[0].X != 3 {
		t.Errorf("others %+v: want ann as her first node says", s.Others)
	}
}

// slowWin is a node whose TryAcquire of a win lock lets the round move on
// (another player's win arrives) before it grants.
type slowWin struct {
	mcnode.Locker
	before func()
	once   sync.Once
}

func (s *slowWin) TryAcquire(ctx context.Context, name string) (mcnode.Lease, error) {
	if strings.HasPrefix(name, "win/") {
		s.once.Do(s.before)
	}
	return s.Locker.TryAcquire(ctx, name)
}

// A win lock granted after the round moved on is kept without a race
// (run with -race).
func TestLateWinLock(t *testing.T) {
	quick(t)
	nodes := startNodes(t, mcnode.Multicast, 1)
	sw := &slowWin{Locker: nodes[0]}
	p := must(New(sw, Config{Name: "me", Target: 1}))
	sw.before = func() {
		p.receive(5, rawState("other", 1, 1, 1))
		p.receive(5, raw(message{Type: "win", Win: &Win{Round: 1, Player: "other", Score: 1}}))
	}
	p.mu.Lock()
	p.me.Score = 1 // at the target: the tick claims the win
	p.mu.Unlock()
	p.Start()
	time.Sleep(500 * time.Millisecond)
	if r := p.Stop(0); len(r.Wins) != 1 || r.Wins[0].Player != "other" {
		t.Errorf("wins %+v, want other's alone", r.Wins)
	}
}

// lossyLease is a lease the group takes back after a while (in multicast
// mode: the node was cut off, or paused, for longer than its lease).
type lossyLease struct {
	mcnode.Lease
	lost chan struct{}
}

func (l *lossyLease) Lost() <-chan struct{} { return l.lost }
func (l *lossyLease) Err() error {
	select {
	case <-l.lost:
		return errors.New("lease lost")
	default:
		return nil
	}
}

type lossyNode struct{ mcnode.Locker }

func (n lossyNode) TryAcquire(ctx context.Context, name string) (mcnode.Lease, error) {
	l, err := n.Locker.TryAcquire(ctx, name)
	if err != nil || !strings.HasPrefix(name, "pu/") {
		return l, err
	}
	ll := &lossyLease{Lease: l, lost: make(chan struct{})}
	time.AfterFunc(100*time.Millisecond, func() { l.Release(); close(ll.lost) })
	return ll, nil
}

// dropAndWatch: a, on node an, steps onto a power-up; once the spawner s
// has heard the pick (the power-up left play), it reports whether the
// power-up comes back into play within 6 s.
func dropAndWatch(t *testing.T, an mcnode.Locker, s *Player) bool {
	a := must(New(an, Config{Name: "a", Seed: 2, Target: 1000}))
	a.Start()
	defer a.Stop(time.Second)
	var pu PowerUp
	for deadline := time.Now().Add(5 * time.Second); pu.ID == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ps := a.Snapshot().PowerUps; len(ps) > 0 {
			pu = ps[0]
		}
	}
	if pu.ID == "" {
		t.Fatal("a sees no power-up")
	}
	a.mu.Lock()
	a.me.X, a.me.Y = pu.X-1, pu.Y
	dx := 1
	if pu.X == 0 {
		a.me.X, dx = pu.X+1, -1
	}
	a.mu.Unlock()
	a.Move(dx, 0)
	inPlay := func() bool {
		for _, p := range s.Snapshot().PowerUps {
			if p.ID == pu.ID {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(3 * time.Second); inPlay() && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
	}
	if inPlay() {
		t.Fatal("the spawner never heard the pick")
	}
	for deadline := time.Now().Add(6 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if inPlay() {
			return true
		}
	}
	return false
}

// A picker that gives a pickup up and plays on (its lease lost; its time
// up, though not lost) lets the power-up come back into play; one that
// consumes it does not (the check can fail).
func TestDroppedPickupComesBack(t *testing.T) {
	quick(t)
	for _, c := range []struct {
		name string
		node func(mcnode.Locker) mcnode.Locker
		back bool
	}{
		{"lease lost", func(l mcnode.Locker) mcnode.Locker { return lossyNode{l} }, true},
		{"time up", func(l mcnode.Locker) mcnode.Locker { return pausedNode{l} }, true},
		{"consumed", func(l mcnode.Locker) mcnode.Locker { return l }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			nodes := startNodes(t, mcnode.Multicast, 2)
			s := must(New(nodes[0], Config{Name: "spawner", Seed: 1, Target: 1000}))
			s.Start()
			defer s.Stop(time.Second)
			time.Sleep(time.Second) // s holds "spawner" and has spawned
			if back := dropAndWatch(t, c.node(nodes[1]), s); back != c.back {
				t.Errorf("back into play: %v, want %v", back, c.back)
			}
		})
	}
}

// pausedLease is a lease whose holder was paused past it: its runtime has
// not run to report it lost, but its time is up.
type pausedLease struct{ mcnode.Lease }

func (pausedLease) TimeLeft() (time.Duration, bool) { return -time.Second, true }

type pausedNode struct{ mcnode.Locker }

func (n pausedNode) TryAcquire(ctx context.Context, name string) (mcnode.Lease, error) {
	l, err := n.Locker.TryAcquire(ctx, name)
	if err != nil || !strings.HasPrefix(name, "pu/") {
		return l, err
	}
	return pausedLease{l}, nil
}

// A player whose lease's time is up when its pickup ends does not consume,
// though nothing told it the lease was lost.
func TestPausedPickerDoesNotConsume(t *testing.T) {
	quick(t)
	nodes := startNodes(t, mcnode.Multicast, 1)
	var mu sync.Mutex
	var kinds []string
	p := must(New(pausedNode{nodes[0]}, Config{Name: "p", Bot: true, Seed: 3, Target: 1000, OnEvent: func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		kinds = append(kinds, e.Kind)
	}}))
	p.Start()
	time.Sleep(4 * time.Second)
	r := p.Stop(time.Second)
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(kinds, ",")
	if !strings.Contains(all, "drop") || strings.Contains(all, "got") || r.Scoreboard[0].Won != 0 {
		t.Errorf("events %s, scoreboard %+v: want drops and nothing consumed", all, r.Scoreboard)
	}
}

// Of two takes of one power-up (a paused holder's, and the next holder's),
// the higher fencing token stands everywhere, and the paused one gives back
// what it got.
func TestHigherTokenStands(t *testing.T) {
	nodes := startNodes(t, mcnode.Multicast, 1)
	p := must(New(nodes[0], Config{Name: "me", Watch: true}))
	p.receive(5, rawState("old", 1, 1, 1))
	p.receive(6, rawState("new", 2, 2, 1))
	p.receive(6, raw(message{Type: "got", Take: &Take{ID: "7.1", Kind: Points, Player: "new", Token: 20, Round: 1}}))
	p.receive(5, raw(message{Type: "got", Take: &Take{ID: "7.1", Kind: Points, Player: "old", Token: 10, Round: 1}}))
	if r := p.Stop(0); len(r.Takes) != 1 || r.Takes[0].Player != "new" {
		t.Errorf("takes %+v, want new's alone", r.Takes)
	}
	// The paused player's own view: its take, then the later holder's.
	q := must(New(nodes[0], Config{Name: "old", Target: 1000}))
	q.mu.Lock()
	q.me.Score, q.me.Total, q.me.Won = 10, 10, 1
	q.w.recordTake(Take{ID: "7.1", Kind: Points, Player: "old", Token: 10, Round: 1})
	q.mu.Unlock()
	q.receive(6, rawState("new", 2, 2, 1))
	q.receive(6, raw(message{Type: "got", Take: &Take{ID: "7.1", Kind: Points, Player: "new", Token: 20, Round: 1}}))
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.me.Score != 0 || q.me.Won != 0 || len(q.w.Takes) != 1 || q.w.Takes[0].Player != "new" {
		t.Errorf("the superseded player kept its take: score %d, won %d, takes %+v", q.me.Score, q.me.Won, q.w.Takes)
	}
}

// Players that stop at different times (each process its own --duration)
// still agree.
func TestStaggeredStop(t *testing.T) {
	quick(t)
	nodes := startNodes(t, mcnode.Quorum, 3)
	var players []*Player
	for i, n := range nodes {
		players = append(players, must(New(n, Config{Name: fmt.Sprintf("bot%d", i+1), Bot: true, Seed: int64(i), Target: 20})))
	}
	for _, p := range players {
		p.Start()
	}
	time.Sleep(3 * time.Second)
	first := make(chan Result)
	go func() { first <- players[0].Stop(5 * time.Second) }()
	time.Sleep(1500 * time.Millisecond)
	rest := StopAll(players[1:], 5*time.Second)
	checkRecords(t, append([]Result{<-first}, rest...), 20)
}

// A spawn list speaks for nobody: it carries no win, and moves a player on
// by one round at most.
func TestSpawnListsMoveNoFurther(t *testing.T) {
	nodes := startNodes(t, mcnode.Multicast, 1)
	p := must(New(nodes[0], Config{Name: "me", Watch: true, Target: 50}))
	p.receive(5, raw(message{Type: "spawn", Round: 1, Win: &Win{Round: 1, Player: "nobody", Score: 100}}))
	if s := p.Snapshot(); s.Round != 1 || len(s.Wins) != 0 {
		t.Errorf("a win in a spawn list moved the player to round %d, wins %+v", s.Round, s.Wins)
	}
	for range 10 {
		p.receive(5, raw(message{Type: "spawn", Round: p.Snapshot().Round + maxAhead}))
	}
	if s := p.Snapshot(); s.Round != 1 {
		t.Errorf("ten spawn lists moved the player to round %d", s.Round)
	}
	p.receive(5, raw(message{Type: "spawn", Round: 2}))
	if s := p.Snapshot(); s.Round != 2 {
		t.Errorf("a spawn list of the next round: round %d, want 2", s.Round)
	}
}

// Players that left make room for new ones; one node speaks for one live
// player only.
func TestPlayerTable(t *testing.T) {
	nodes := startNodes(t, mcnode.Multicast, 1)
	p := must(New(nodes[0], Config{Name: "me", Watch: true}))
	for i := range MaxPlayers {
		p.receive(uint64(100+i), rawState(fmt.Sprintf("old%d", i), 1, 1, 1))
		p.receive(uint64(100+i), raw(message{Type: "bye", Player: fmt.Sprintf("old%d", i)}))
	}
	p.receive(7, rawState("bob", 3, 3, 1)) // a new player, long after the others left
	if s := p.Snapshot(); len(s.Others) != 1 || s.Others[0].Name != "bob" {
		t.Errorf("all %d earlier players gone, a new one is not seen: others %+v", MaxPlayers, s.Others)
	}
	p.receive(7, rawState("bob2", 4, 4, 1)) // bob's node speaks for another name
	if s := p.Snapshot(); len(s.Others) != 1 {
		t.Errorf("one node speaks for two players: %+v", s.Others)
	}
}
