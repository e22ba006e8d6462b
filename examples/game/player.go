package game

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcnode/mcnode"
)

// Topic is the application state updates' topic.
const Topic = "game"

// Config configures a player.
type Config struct {
	// Name is the player's name, unique in the game.
	Name string
	// Bot makes the player move by itself.
	Bot bool
	// Watch makes a spectator: it shows the game and takes no part (it
	// neither reports a state nor spawns).
	Watch bool
	// Seed seeds the bot's moves, the spawner's choices and the respawns.
	Seed int64
	// Target is the score that wins a round (default 100).
	Target int
	// OnEvent, if set, is told of what happens, from the goroutine that saw
	// it; it must not block for long.
	OnEvent func(Event)
}

// Event is something that happened in the game, as one player saw it.
type Event struct {
	// At is the time since the player started; AtMS the same in
	// milliseconds, for JSON.
	At   time.Duration `json:"-"`
	AtMS int64         `json:"at_ms"`
	// Kind is spawn, back, pick, got, lost, drop, win, out, respawn (the
	// player's own doing, or its spawner's) or join, gone, won, clash
	// (heard of another player).
	Kind string `json:"event"`
	// Player is who did it.
	Player  string `json:"player"`
	PowerUp string `json:"powerup,omitempty"`
	Of      Kind   `json:"kind,omitempty"`
	By      string `json:"by,omitempty"` // lost: who took it; drop: why
	Score   int    `json:"score,omitempty"`
	Round   int    `json:"round,omitempty"`
	Token   uint64 `json:"token,omitempty"`
	// Heard marks news of another player rather than this one's doing.
	Heard bool `json:"heard,omitempty"`
}

// String is the event as a line of the game's log: the time, then Text.
func (e Event) String() string { return fmt.Sprintf("%7.3fs %s", e.At.Seconds(), e.Text()) }

// Text says what happened, in words.
func (e Event) Text() string {
	switch e.Kind {
	case "spawn":
		return fmt.Sprintf("%s spawns %s %s", e.Player, e.Of, Label(e.PowerUp))
	case "back":
		return fmt.Sprintf("%s puts %s %s back into play", e.Player, e.Of, Label(e.PowerUp))
	case "pick":
		return fmt.Sprintf("%s picks up %s %s (token %d)", e.Player, e.Of, Label(e.PowerUp), e.Token)
	case "got":
		return fmt.Sprintf("%s got %s %s, score %d", e.Player, e.Of, Label(e.PowerUp), e.Score)
	case "lost":
		return fmt.Sprintf("%s lost %s %s: taken by %s", e.Player, e.Of, Label(e.PowerUp), e.By)
	case "drop":
		return fmt.Sprintf("%s dropped %s %s: %s", e.Player, e.Of, Label(e.PowerUp), e.By)
	case "win", "won":
		return fmt.Sprintf("%s wins round %d with %d", e.Player, e.Round, e.Score)
	case "out":
		return fmt.Sprintf("%s is out of health", e.Player)
	case "respawn":
		return fmt.Sprintf("%s respawns", e.Player)
	case "join":
		return fmt.Sprintf("%s joins", e.Player)
	case "gone":
		return fmt.Sprintf("%s is gone", e.Player)
	case "clash":
		return fmt.Sprintf("another player is named %s too: the others see only one of you (choose another --name)", e.Player)
	}
	return fmt.Sprintf("%s %s", e.Player, e.Kind)
}

// Label is a power-up's short name for people: "#" and its count within
// its spawner's turn (the ID's part after the fencing token).
func Label(id string) string {
	if i := strings.LastIndexByte(id, '.'); i >= 0 {
		return "#" + id[i+1:]
	}
	return id
}

// Player is one node's player: its own state, its view of the world, and
// the node it plays through.
type Player struct {
	cfg   Config
	node  mcnode.Locker
	start time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	w        *World
	me       State
	rng      *rand.Rand
	known    map[string]PowerUp // every power-up of this round, by ID
	held     []heldLock         // power-up locks kept after consuming
	wins     []mcnode.Lease     // the win locks this player holds
	waits    []time.Duration    // acquire latencies
	outUntil time.Time
	winning  bool // asking for this round's win lock
	// pickedAt is when this node heard each pickup under way begin;
	// dropped, the pickups their pickers gave up (lease lost, round over):
	// the spawner puts them back once it can take their locks.
	pickedAt map[string]time.Time
	dropped  map[string]bool
	// clashed: another node spoke for this player's name (two players
	// chose one name), and the player was told.
	clashed bool
	// settled: this node has heard which round the game is at (from a
	// player in it, its spawner or a win), or is its spawner. Until then
	// it is a newcomer, with no round of its own to judge others by: it
	// takes the game's from the first who tells it, however far ahead.
	settled bool
	// republished counts this player's takes republished, one a report,
	// so that a lost report of a take does no lasting harm.
	republished int
	stopped     bool
	roundAt     map[int]time.Time // when this player entered each round
	// sentBefore is what the node had sent when the game started: its
	// joining is not the game's traffic.
	sentBefore [2]uint64
}

type heldLock struct {
	lease mcnode.Lease
	round int
}

// ErrName is New's error for a name that is not ValidName.
var ErrName = errors.New("game: a player's name is 1 to 16 letters, digits, '-', '_' or '.'")

// New makes a player on a node; Start starts it.
func New(node mcnode.Locker, cfg Config) (*Player, error) {
	if !ValidName(cfg.Name) {
		return nil, fmt.Errorf("%w: %q", ErrName, cfg.Name)
	}
	if cfg.Target <= 0 {
		cfg.Target = 100
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Player{cfg: cfg, node: node, ctx: ctx, cancel: cancel, w: newWorld(), rng: rand.New(rand.NewSource(cfg.Seed)),
		known: map[string]PowerUp{}, roundAt: map[int]time.Time{}, pickedAt: map[string]time.Time{}, dropped: map[string]bool{}}
	p.me = State{Name: cfg.Name, Round: 1, Health: MaxHealth, Bot: cfg.Bot, Joining: true}
	p.me.X, p.me.Y = p.rng.Intn(Width), p.rng.Intn(Height)
	return p, nil
}

// Start joins the game: the player listens, reports itself, waits for its
// turn as spawner and, if a bot, plays.
func (p *Player) Start() {
	p.start = time.Now()
	if st, err := p.node.Status(); err == nil {
		p.sentBefore = [2]uint64{st.Sent, st.Core}
	}
	updates, stop := p.node.Subscribe(Topic)
	p.goroutine(func() {
		<-p.ctx.Done()
		stop()
	})
	p.goroutine(func() {
		for u := range updates {
			p.receive(u.From, u.Data)
		}
	})
	p.goroutine(p.tick)
	if !p.cfg.Watch {
		p.goroutine(p.spawner)
	}
	if p.cfg.Bot && !p.cfg.Watch {
		p.goroutine(p.bot)
	}
}

func (p *Player) goroutine(f func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
}

// Name is the player's name.
func (p *Player) Name() string { return p.cfg.Name }

func (p *Player) event(e Event) {
	e.At = time.Since(p.start)
	e.AtMS = e.At.Milliseconds()
	if p.cfg.OnEvent != nil {
		p.cfg.OnEvent(e)
	}
}

// publish sends a message to the others; the game goes on without it if it
// cannot (the next report carries the news).
func (p *Player) publish(m message) {
	_ = p.node.Publish(Topic, m.encode())
}

// publishState reports this player's state; called with p.mu held.
func (p *Player) publishState() {
	if p.cfg.Watch {
		return
	}
	st := p.me
	p.publish(message{Type: "state", State: &st})
}

// receive applies another player's update, sent by node from.
func (p *Player) receive(from uint64, data []byte) {
	var m message
	if json.Unmarshal(data, &m) != nil || !m.valid() {
		return // not ours, garbled or out of bounds: nothing to apply
	}
	var events []Event
	p.mu.Lock()
	defer func() {
		p.mu.Unlock()
		for _, e := range events {
			p.event(e)
		}
	}()
	who := m.speaker()
	if who == p.me.Name && !p.clashed {
		p.clashed = true
		events = append(events, Event{Kind: "clash", Player: p.me.Name, Heard: true})
	}
	if who != "" && !p.speaksFor(from, who, m.Type == "state") {
		return
	}
	// A node settled in the game's round refuses news from far ahead of
	// it (a hostile peer's, say); a newcomer has nothing to measure by, and
	// a game may be at round 12 when it joins.
	far := m.round() > p.w.Round+maxAhead
	if far && p.settled {
		return
	}
	switch m.Type {
	case "state":
		s := p.w.Players[m.State.Name]
		if s.gone || s.at.IsZero() {
			events = append(events, Event{Kind: "join", Player: m.State.Name, Heard: true})
		}
		s.State, s.at, s.gone = *m.State, time.Now(), false
		switch {
		case !p.settled && !m.State.Joining:
			p.settle(m.State.Round) // a player in the game: its round is the game's
		case !far:
			p.catchUp(m.State.Round)
		}
	case "spawn":
		// A spawn list speaks for nobody: it may move a settled node on by
		// one round (it missed the win), not more. A newcomer takes its
		// round.
		switch {
		case !p.settled && m.Round > 0:
			p.settle(m.Round)
		case m.Round == p.w.Round+1:
			p.catchUp(m.Round)
		}
		for _, pu := range m.PowerUps {
			if pu.Round == p.w.Round {
				p.known[pu.ID] = pu
			}
		}
		for _, id := range m.Back {
			delete(p.pickedAt, id)
			delete(p.dropped, id)
		}
		p.w.spawnList(m.Round, m.PowerUps, m.Back)
	case "pick":
		if t, done := p.w.taken(m.ID); (!done || t.Token < m.Token) && m.Round == p.w.Round {
			p.w.Picking[m.ID] = m.Player
			p.pickedAt[m.ID] = time.Now()
			delete(p.w.PowerUps, m.ID)
			delete(p.dropped, m.ID)
		}
	case "drop":
		if p.w.Picking[m.ID] == m.Player {
			delete(p.w.Picking, m.ID)
			p.dropped[m.ID] = true
		}
	case "got":
		if stands, replaced := p.w.recordTake(*m.Take); stands && replaced != nil && replaced.Player == p.me.Name {
			events = append(events, p.retract(*replaced, m.Take.Player))
		}
	case "win":
		if m.Win.Score >= p.cfg.Target && p.applyWin(*m.Win) {
			p.settle(p.w.Round)
			events = append(events, Event{Kind: "won", Player: m.Win.Player, Round: m.Win.Round, Score: m.Win.Score, Heard: true})
		}
	case "bye":
		if s := p.w.Players[m.Player]; !s.gone {
			s.gone = true
			events = append(events, Event{Kind: "gone", Player: m.Player, Heard: true})
		}
	}
}

// speaksFor reports whether node from may speak for player who: the first
// node heard for a name keeps it, until its player is gone; nobody speaks
// for this player but itself, and a node for one live player only. A state
// makes the player known (up to MaxPlayers, the longest gone forgotten to
// make room), other messages only speak for known players. Called with p.mu
// held.
func (p *Player) speaksFor(from uint64, who string, state bool) bool {
	if who == p.me.Name {
		return false
	}
	s, ok := p.w.Players[who]
	switch {
	case ok && s.from == from:
		return true
	case ok && s.gone && state && !p.speaking(from):
		s.from = from // the player came back on another node, or rejoined
		return true
	case !ok && state && !p.speaking(from) && p.room():
		p.w.Players[who] = &seen{from: from, gone: true}
		return true
	}
	return false
}

// speaking reports whether node from speaks for a player that is not gone:
// a node plays one player. Called with p.mu held.
func (p *Player) speaking(from uint64) bool {
	for _, s := range p.w.Players {
		if s.from == from && !s.gone {
			return true
		}
	}
	return false
}

// room makes room for one more player if the table is full, forgetting the
// player gone longest; it reports whether there is room. Called with p.mu
// held.
func (p *Player) room() bool {
	if len(p.w.Players) < MaxPlayers {
		return true
	}
	oldest := ""
	for name, s := range p.w.Players {
		if s.gone && (oldest == "" || s.at.Before(p.w.Players[oldest].at)) {
			oldest = name
		}
	}
	if oldest == "" {
		return false
	}
	delete(p.w.Players, oldest)
	return true
}

// retract undoes this player's take that a later holder of the power-up's
// lock superseded (this node was cut off or paused past its lease, and
// loses what it held); called with p.mu held.
func (p *Player) retract(t Take, by string) Event {
	dh, ds := t.Kind.effect()
	if t.Round == p.w.Round {
		p.me.Score = max(p.me.Score-ds, 0)
		p.me.Health = max(p.me.Health-dh, 1)
	}
	p.me.Total = max(p.me.Total-ds, 0)
	p.me.Won--
	p.me.Lost++
	p.publishState()
	return Event{Kind: "lost", Player: p.me.Name, PowerUp: t.ID, Of: t.Kind, By: by + " (a later holder of its lock)"}
}

// settle makes this node a settled player of the game at round r or
// later (see Player.settled); called with p.mu held.
func (p *Player) settle(r int) {
	p.settled, p.me.Joining = true, false
	p.catchUp(r)
}

// catchUp moves to a later round that another player reports (its win
// message did not arrive); called with p.mu held.
func (p *Player) catchUp(round int) {
	if round > p.w.Round {
		p.enterRound(round)
	}
}

// applyWin records a round won and starts the next; called with p.mu held.
// It reports whether the win was news.
func (p *Player) applyWin(win Win) bool {
	if slices.ContainsFunc(p.w.Wins, func(x Win) bool { return x.Round == win.Round }) {
		return false
	}
	p.w.Wins = append(p.w.Wins, win)
	if len(p.w.Wins) > MaxRecord {
		p.w.Wins = p.w.Wins[len(p.w.Wins)-MaxRecord:]
	}
	if win.Round >= p.w.Round {
		p.enterRound(win.Round + 1)
	}
	return true
}

// enterRound starts round r for this player; called with p.mu held.
func (p *Player) enterRound(r int) {
	p.w.newRound(r)
	p.roundAt[r] = time.Now()
	clear(p.known)
	clear(p.pickedAt)
	clear(p.dropped)
	p.me.Round, p.me.Score, p.me.Picking = r, 0, ""
	p.winning = false
	p.publishState()
}

// Move moves the player by one cell (dx, dy in -1..1), unless it is out or
// picking something up; stepping onto a power-up picks it up.
func (p *Player) Move(dx, dy int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || p.cfg.Watch || p.me.Out || p.me.Picking != "" {
		return
	}
	p.me.X = min(max(p.me.X+dx, 0), Width-1)
	p.me.Y = min(max(p.me.Y+dy, 0), Height-1)
	p.publishState()
	if pu, ok := p.w.at(p.me.X, p.me.Y); ok {
		p.me.Picking = pu.ID
		p.goroutine(func() { p.pickUp(pu) })
	}
}

// pickUp asks for the power-up's lock; the player granted it holds it for
// PickTime, then consumes the power-up.
func (p *Player) pickUp(pu PowerUp) {
	ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
	defer cancel()
	t0 := time.Now()
	lease, err := p.node.TryAcquire(ctx, "pu/"+pu.ID)
	waited := time.Since(t0)
	p.mu.Lock()
	p.waits = append(p.waits, waited)
	_, done := p.w.taken(pu.ID)
	if err != nil || done || p.w.Round != pu.Round || p.stopped {
		p.me.Picking = ""
		var lost *Event
		if errors.Is(err, mcnode.ErrLocked) || err == nil && done {
			p.me.Lost++
			by := p.w.Picking[pu.ID]
			if t, ok := p.w.taken(pu.ID); ok {
				by = t.Player
			}
			if by == "" {
				by = "another player"
			}
			delete(p.w.PowerUps, pu.ID)
			p.w.marks = append(p.w.marks, mark{x: pu.X, y: pu.Y, text: "taken by " + by, until: time.Now().Add(2 * time.Second)})
			lost = &Event{Kind: "lost", Player: p.me.Name, PowerUp: pu.ID, Of: pu.Kind, By: by}
		}
		p.publishState()
		p.mu.Unlock()
		if lease != nil {
			_ = lease.Release() // the round is over, or it was consumed before this node heard
		}
		if lost != nil {
			p.event(*lost)
		}
		return
	}
	p.w.Picking[pu.ID] = p.me.Name
	delete(p.w.PowerUps, pu.ID)
	p.publish(message{Type: "pick", ID: pu.ID, Player: p.me.Name, Round: pu.Round, Token: lease.Token()})
	p.mu.Unlock()
	p.event(Event{Kind: "pick", Player: p.me.Name, PowerUp: pu.ID, Of: pu.Kind, Token: lease.Token()})

	select {
	case <-time.After(PickTime):
	case <-lease.Lost():
	case <-p.ctx.Done():
	}
	p.mu.Lock()
	take := Take{ID: pu.ID, Kind: pu.Kind, Player: p.me.Name, Token: lease.Token(), Round: pu.Round}
	why := ""
	left, expires := lease.TimeLeft()
	switch {
	case lease.Err() != nil:
		why = "its lease was lost" // cut off or removed: the group may hand it to another
	case expires && left < ConsumeMargin:
		// This process may have been paused: its runtime has not yet run
		// to report the lease lost, but the group may have handed the
		// power-up on already.
		why = "its lease had run out or nearly (was this process paused?)"
	case p.w.Round != pu.Round:
		why = "the round is over"
	case p.ctx.Err() != nil:
		why = "the game is over"
	}
	if why == "" {
		if stands, _ := p.w.recordTake(take); !stands {
			why = "a later holder of its lock took it"
		}
	}
	p.me.Picking = ""
	if why != "" {
		if p.w.Picking[pu.ID] == p.me.Name {
			delete(p.w.Picking, pu.ID)
			p.dropped[pu.ID] = true
		}
		p.publish(message{Type: "drop", ID: pu.ID, Player: p.me.Name, Round: pu.Round})
		p.publishState()
		p.mu.Unlock()
		// Given up, so let go: the spawner puts it back once it can take
		// the lock (a lease lost already makes this a no-op).
		_ = lease.Release()
		p.event(Event{Kind: "drop", Player: p.me.Name, PowerUp: pu.ID, Of: pu.Kind, By: why})
		return
	}
	p.held = append(p.held, heldLock{lease: lease, round: pu.Round})
	dh, ds := pu.Kind.effect()
	p.me.Health = min(p.me.Health+dh, MaxHealth)
	p.me.Score += ds
	p.me.Total += ds
	p.me.Won++
	p.publish(message{Type: "got", Take: &take})
	p.publishState()
	score := p.me.Score
	p.mu.Unlock()
	p.event(Event{Kind: "got", Player: p.me.Name, PowerUp: pu.ID, Of: pu.Kind, Score: score, Token: take.Token})
}

// tick runs the player's clock: health drains, an out player respawns,
// state is reported, silent players are counted gone, a round's locks are
// let go after the grace, and a player at the target asks to win.
func (p *Player) tick() {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	lastDrain, lastState := time.Now(), time.Time{}
	for {
		select {
		case <-p.ctx.Done():
			return
		case now := <-t.C:
			var events []Event
			var release []mcnode.Lease
			p.mu.Lock()
			if now.Sub(lastDrain) >= time.Second && !p.cfg.Watch {
				lastDrain = now
				if !p.me.Out && p.me.Picking == "" {
					p.me.Health--
				}
				if p.me.Health <= 0 && !p.me.Out {
					p.me.Out, p.me.Health, p.outUntil = true, 0, now.Add(OutFor)
					events = append(events, Event{Kind: "out", Player: p.me.Name})
					p.publishState()
				}
			}
			if p.me.Out && now.After(p.outUntil) {
				p.me.Out, p.me.Health = false, MaxHealth
				p.me.X, p.me.Y = p.rng.Intn(Width), p.rng.Intn(Height)
				events = append(events, Event{Kind: "respawn", Player: p.me.Name})
				p.publishState()
			}
			for _, name := range slices.Sorted(maps.Keys(p.w.Players)) {
				if s := p.w.Players[name]; !s.gone && now.Sub(s.at) > GoneAfter {
					s.gone = true
					events = append(events, Event{Kind: "gone", Player: name, Heard: true})
				}
			}
			p.held = slices.DeleteFunc(p.held, func(h heldLock) bool {
				if h.round < p.w.Round && now.Sub(p.roundStarted(h.round+1)) > Grace {
					release = append(release, h.lease)
					return true
				}
				return false
			})
			p.w.marks = slices.DeleteFunc(p.w.marks, func(m mark) bool { return now.After(m.until) })
			if now.Sub(lastState) >= StateEvery {
				lastState = now
				p.refreshStats()
				p.publishState()
				p.republishTake()
			}
			if p.me.Score >= p.cfg.Target && !p.winning && !p.stopped && !p.cfg.Watch {
				p.winning = true
				round, score := p.w.Round, p.me.Score
				p.goroutine(func() { p.claimWin(round, score) })
			}
			p.mu.Unlock()
			for _, l := range release {
				_ = l.Release()
			}
			for _, e := range events {
				p.event(e)
			}
		}
	}
}

// republishTake sends one of this player's takes of the round again, in
// turn, so that a lost report of one does not leave it out of play for the
// others, nor out of their records; called with p.mu held.
func (p *Player) republishTake() {
	var mine []Take
	for _, t := range p.w.Takes {
		if t.Player == p.me.Name && t.Round == p.w.Round {
			mine = append(mine, t)
		}
	}
	p.republished++
	if n := len(p.w.Wins); n > 0 && p.w.Wins[n-1].Player == p.me.Name && p.w.Wins[n-1].Round == p.w.Round-1 && p.republished%4 == 0 {
		w := p.w.Wins[n-1] // the round this player just won, for a node that missed it
		p.publish(message{Type: "win", Win: &w})
	}
	if len(mine) == 0 || p.cfg.Watch {
		return
	}
	t := mine[p.republished%len(mine)]
	p.publish(message{Type: "got", Take: &t})
}

// roundStarted is when this player entered round r, as far as the grace
// needs to know: the round's win is recorded with no time, so the grace
// counts from when this node learnt of it.
func (p *Player) roundStarted(r int) time.Time {
	if t, ok := p.roundAt[r]; ok {
		return t
	}
	return time.Now()
}

// refreshStats updates the player's acquire latencies and its node's
// traffic; called with p.mu held.
func (p *Player) refreshStats() {
	if n := len(p.waits); n > 0 {
		s := slices.Clone(p.waits)
		slices.Sort(s)
		p.me.P50 = s[n/2].Microseconds()
		p.me.P99 = s[min(n*99/100, n-1)].Microseconds()
	}
	if st, err := p.node.Status(); err == nil {
		p.me.Sent, p.me.Core = st.Sent-p.sentBefore[0], st.Core-p.sentBefore[1]
	}
}

// claimWin asks for the round's win lock: the first player granted it wins
// the round.
func (p *Player) claimWin(round, score int) {
	ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
	defer cancel()
	lease, err := p.node.TryAcquire(ctx, fmt.Sprintf("win/%d", round))
	p.mu.Lock()
	if lease != nil {
		p.wins = append(p.wins, lease) // released when the game ends
	}
	if err != nil || p.w.Round != round {
		if err != nil && !errors.Is(err, mcnode.ErrLocked) && p.w.Round == round {
			p.winning = false // not refused, only not answered: ask again
		}
		p.mu.Unlock()
		return
	}
	// The lock is kept: a player who reaches the target late, or missed
	// the news, finds it taken.
	p.me.Wins++
	win := Win{Round: round, Player: p.me.Name, Score: score}
	p.publish(message{Type: "win", Win: &win})
	p.applyWin(win)
	p.mu.Unlock()
	p.event(Event{Kind: "win", Player: p.me.Name, Round: round, Score: score, Token: lease.Token()})
}

// Status reports the player's node.
func (p *Player) Status() (mcnode.Status, error) { return p.node.Status() }
