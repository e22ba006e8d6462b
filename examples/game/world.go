package game

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"
)

// The arena and the rules.
const (
	// Width and Height are the arena's size in cells.
	Width, Height = 36, 16
	// MaxHealth is a player's health at (re)spawn.
	MaxHealth = 100
	// InPlay is how many power-ups the spawner keeps in the arena.
	InPlay = 6
)

// Timings of the game; variables so that tests can speed them up.
var (
	// PickTime is how long a pickup takes; the player holds the power-up's
	// lock meanwhile.
	PickTime = 800 * time.Millisecond
	// StateEvery is how often a player republishes its state.
	StateEvery = 250 * time.Millisecond
	// SpawnEvery is how often the spawner spawns and republishes its list.
	SpawnEvery = 600 * time.Millisecond
	// GoneAfter is how long a player may be silent before the others count
	// it gone.
	GoneAfter = 2500 * time.Millisecond
	// OutFor is how long a player at zero health stays out.
	OutFor = 4 * time.Second
	// Grace is how long a player keeps the locks of a round that is over.
	Grace = 3 * time.Second
)

// Kind is a power-up's kind.
type Kind string

// The power-ups.
const (
	Health Kind = "health" // +30 health
	Points Kind = "points" // +10 points
	Prize  Kind = "prize"  // +50 points, rare
)

// effect returns what a power-up adds to health and to score.
func (k Kind) effect() (health, score int) {
	switch k {
	case Health:
		return 30, 0
	case Points:
		return 0, 10
	case Prize:
		return 0, 50
	}
	return 0, 0
}

// PowerUp is a power-up in the arena.
type PowerUp struct {
	ID    string `json:"id"`
	Kind  Kind   `json:"kind"`
	X     int    `json:"x"`
	Y     int    `json:"y"`
	Round int    `json:"round"`
}

// State is what a player reports about itself.
type State struct {
	Name   string `json:"name"`
	Round  int    `json:"round"`
	X      int    `json:"x"`
	Y      int    `json:"y"`
	Health int    `json:"health"`
	Score  int    `json:"score"` // this round
	Total  int    `json:"total"` // every round
	Wins   int    `json:"wins"`
	Won    int    `json:"won"`  // power-ups picked up
	Lost   int    `json:"lost"` // power-ups another player got first
	Out    bool   `json:"out,omitempty"`
	Bot    bool   `json:"bot,omitempty"`
	// Picking is the power-up being picked up, if any.
	Picking string `json:"picking,omitempty"`
	// P50 and P99 are the player's acquire latencies, in microseconds.
	P50 int64 `json:"p50_us"`
	P99 int64 `json:"p99_us"`
	// Sent is the lock protocol's traffic of the player's node since the
	// game began; Core the part that asks for, grants and releases locks.
	Sent uint64 `json:"sent"`
	Core uint64 `json:"core"`
	// Final marks the last report of a game that is over.
	Final bool `json:"final,omitempty"`
}

// Take records a power-up consumed.
type Take struct {
	ID     string `json:"id"`
	Kind   Kind   `json:"kind"`
	Player string `json:"player"`
	Token  uint64 `json:"token"`
	Round  int    `json:"round"`
}

// Win records a round won.
type Win struct {
	Round  int    `json:"round"`
	Player string `json:"player"`
	Score  int    `json:"score"`
}

// message is one application state update on the topic "game".
type message struct {
	Type     string    `json:"t"` // state, spawn, pick, got, win, bye
	State    *State    `json:"s,omitempty"`
	Round    int       `json:"r,omitempty"`
	PowerUps []PowerUp `json:"p,omitempty"`
	Back     []string  `json:"back,omitempty"` // spawn: power-ups back in play
	Take     *Take     `json:"take,omitempty"`
	Win      *Win      `json:"win,omitempty"`
	Player   string    `json:"pl,omitempty"`
	ID       string    `json:"id,omitempty"`
}

// MaxName is the longest player name, in bytes.
const MaxName = 32

// valid reports whether a message received can be applied: every cell in
// the arena, every name short, the lists bounded. Another player's update
// is input like any other: one out of bounds must not crash the screen.
func (m message) valid() bool {
	inArena := func(x, y int) bool { return x >= 0 && x < Width && y >= 0 && y < Height }
	name := func(s string) bool { return len(s) <= MaxName }
	switch {
	case m.Round < 0 || len(m.PowerUps) > 4*InPlay || len(m.Back) > 4*InPlay || !name(m.Player) || len(m.ID) > 64:
		return false
	case m.State != nil && (!inArena(m.State.X, m.State.Y) || m.State.Name == "" || !name(m.State.Name) || m.State.Round < 0):
		return false
	case m.Take != nil && (!name(m.Take.Player) || len(m.Take.ID) > 64):
		return false
	case m.Win != nil && !name(m.Win.Player):
		return false
	}
	for _, p := range m.PowerUps {
		if !inArena(p.X, p.Y) || len(p.ID) > 64 {
			return false
		}
	}
	return true
}

func (m message) encode() []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err) // every field marshals
	}
	return b
}

// seen is another player as this node last heard of it.
type seen struct {
	State
	at   time.Time
	gone bool
}

// mark is a note shown on the arena for a while ("taken by P3").
type mark struct {
	x, y  int
	text  string
	until time.Time
}

// World is one node's view of the game. It is owned by its Player, under
// the Player's lock.
type World struct {
	Round    int
	PowerUps map[string]PowerUp // in play
	Picking  map[string]string  // power-up ID -> player picking it up
	Takes    []Take             // every power-up consumed, as this node heard
	Wins     []Win
	Players  map[string]*seen // the others
	marks    []mark
}

func newWorld() *World {
	return &World{Round: 1, PowerUps: map[string]PowerUp{}, Picking: map[string]string{}, Players: map[string]*seen{}}
}

// taken reports whether this node knows the power-up to be consumed.
func (w *World) taken(id string) (Take, bool) {
	for _, t := range w.Takes {
		if t.ID == id {
			return t, true
		}
	}
	return Take{}, false
}

// recordTake adds a take unless this very one is known already; a second,
// different take of one power-up is kept, for the checks to find.
func (w *World) recordTake(t Take) bool {
	if slices.Contains(w.Takes, t) {
		return false
	}
	w.Takes = append(w.Takes, t)
	delete(w.PowerUps, t.ID)
	delete(w.Picking, t.ID)
	return true
}

// spawnList applies a spawner's list of the power-ups in play.
func (w *World) spawnList(round int, list []PowerUp, back []string) (added []PowerUp) {
	if round != w.Round {
		return nil
	}
	for _, id := range back {
		delete(w.Picking, id)
	}
	for _, p := range list {
		_, known := w.PowerUps[p.ID]
		_, picking := w.Picking[p.ID]
		if _, done := w.taken(p.ID); done || picking || known || p.Round != w.Round {
			continue
		}
		w.PowerUps[p.ID] = p
		added = append(added, p)
	}
	return added
}

// newRound moves to round r: the power-ups of the last are gone.
func (w *World) newRound(r int) {
	w.Round = r
	clear(w.PowerUps)
	clear(w.Picking)
}

// at returns the power-up in play at a cell.
func (w *World) at(x, y int) (PowerUp, bool) {
	for _, p := range w.PowerUps {
		if p.X == x && p.Y == y {
			return p, true
		}
	}
	return PowerUp{}, false
}

// Row is one line of a scoreboard.
type Row struct {
	Name  string `json:"name"`
	Wins  int    `json:"wins"`
	Total int    `json:"total"`
	Score int    `json:"score"`
	Won   int    `json:"won"`
	Lost  int    `json:"lost"`
}

// scoreboard ranks players by rounds won, then points, then name.
func scoreboard(states []State) []Row {
	rows := make([]Row, 0, len(states))
	for _, s := range states {
		rows = append(rows, Row{Name: s.Name, Wins: s.Wins, Total: s.Total, Score: s.Score, Won: s.Won, Lost: s.Lost})
	}
	slices.SortFunc(rows, func(a, b Row) int {
		if c := cmp.Compare(b.Wins, a.Wins); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Total, a.Total); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return rows
}
