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
	// ConsumeMargin is how much of its lease a player must have left to
	// consume what it picked up (multicast mode: quorum locks do not
	// expire).
	ConsumeMargin = 500 * time.Millisecond
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
	// Joining marks a player that has not yet heard which round the game
	// is at: its round is no evidence of the game's, so a newcomer that
	// hears it does not settle on it.
	Joining bool `json:"joining,omitempty"`
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
	Type     string    `json:"t"` // state, spawn, pick, got, drop, win, bye
	State    *State    `json:"s,omitempty"`
	Round    int       `json:"r,omitempty"`
	PowerUps []PowerUp `json:"p,omitempty"`
	Back     []string  `json:"back,omitempty"` // spawn: power-ups back in play
	Take     *Take     `json:"take,omitempty"`
	Win      *Win      `json:"win,omitempty"`
	Player   string    `json:"pl,omitempty"`
	ID       string    `json:"id,omitempty"`
	Token    uint64    `json:"tok,omitempty"` // pick: the lock's fencing token
}

// speaker is the player a message speaks for ("" for a spawn list, which
// whoever holds the spawner lock sends).
func (m message) speaker() string {
	switch {
	case m.Type == "state" && m.State != nil:
		return m.State.Name
	case m.Type == "got" && m.Take != nil:
		return m.Take.Player
	case m.Type == "win" && m.Win != nil:
		return m.Win.Player
	case m.Type == "spawn":
		return ""
	}
	return m.Player
}

// round is the latest round a message speaks of.
func (m message) round() int {
	r := m.Round
	if m.State != nil {
		r = max(r, m.State.Round)
	}
	if m.Take != nil {
		r = max(r, m.Take.Round)
	}
	if m.Win != nil {
		r = max(r, m.Win.Round)
	}
	return r
}

// Bounds on what the game keeps and takes from others.
const (
	// MaxName is the longest player name.
	MaxName = 16
	// MaxPlayers bounds the players a node keeps track of.
	MaxPlayers = 64
	// MaxRecord bounds the takes and wins a node records (the oldest go).
	MaxRecord = 10000
	// maxAhead is how many rounds ahead of this node another may be and
	// still be believed, once this node has settled in the game's round
	// (Player.settled): a node may have missed a win or two, not a
	// thousand.
	maxAhead = 8
)

// ValidName reports whether name can be a player's: 1 to MaxName
// letters, digits, '-', '_' or '.', so that it draws as one cell per
// character and carries nothing a terminal would act on.
func ValidName(name string) bool {
	if name == "" || len(name) > MaxName {
		return false
	}
	for _, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// valid reports whether a message received can be applied: every cell in
// the arena, every name valid, the rounds and lists bounded. Another
// player's update is input like any other: none may crash or stall a node.
func (m message) valid() bool {
	inArena := func(x, y int) bool { return x >= 0 && x < Width && y >= 0 && y < Height }
	id := func(s string) bool { return len(s) <= 64 }
	const maxRound = 1 << 30
	switch {
	case m.Round < 0 || m.Round > maxRound || len(m.PowerUps) > 4*InPlay || len(m.Back) > 4*InPlay || !id(m.ID):
		return false
	case m.Player != "" && !ValidName(m.Player):
		return false
	case m.State != nil && (!inArena(m.State.X, m.State.Y) || !ValidName(m.State.Name) || m.State.Round < 0 || m.State.Round > maxRound):
		return false
	case m.Take != nil && (!ValidName(m.Take.Player) || !id(m.Take.ID) || m.Take.Round < 0 || m.Take.Round > maxRound):
		return false
	case m.Win != nil && (!ValidName(m.Win.Player) || m.Win.Round < 1 || m.Win.Round > maxRound):
		return false
	}
	for _, p := range m.PowerUps {
		if !inArena(p.X, p.Y) || !id(p.ID) || p.Round < 0 || p.Round > maxRound {
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
	from uint64 // the node that speaks for this player (mcnode.Update.From)
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
	took     map[string]int // power-up ID -> its take's place in Takes
}

func newWorld() *World {
	return &World{Round: 1, PowerUps: map[string]PowerUp{}, Picking: map[string]string{}, Players: map[string]*seen{}, took: map[string]int{}}
}

// taken reports whether this node knows the power-up to be consumed.
func (w *World) taken(id string) (Take, bool) {
	if i, ok := w.took[id]; ok {
		return w.Takes[i], true
	}
	return Take{}, false
}

// recordTake records a power-up consumed. Of two takes of one power-up
// the one with the higher fencing token stands: its taker held the lock
// after the other's lease ran out (the other was cut off or paused, and
// loses what it held). It returns whether t now stands, and the take it
// replaced, if any.
func (w *World) recordTake(t Take) (stands bool, replaced *Take) {
	if i, ok := w.took[t.ID]; ok {
		old := w.Takes[i]
		if t.Token <= old.Token {
			return t == old, nil
		}
		w.Takes[i] = t
		return true, &old
	}
	w.took[t.ID] = len(w.Takes)
	w.Takes = append(w.Takes, t)
	if len(w.Takes) > MaxRecord {
		// The oldest tenth goes at once, so that the index is rebuilt
		// once per MaxRecord/10 takes, not at each.
		w.Takes = slices.Clone(w.Takes[MaxRecord/10:])
		clear(w.took)
		for i, k := range w.Takes {
			w.took[k.ID] = i
		}
	}
	delete(w.PowerUps, t.ID)
	delete(w.Picking, t.ID)
	return true, nil
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
