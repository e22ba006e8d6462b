package game

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Result is a player's record of a game.
type Result struct {
	Player string `json:"player"`
	// Takes are the power-ups consumed, as this node heard of them.
	Takes []Take `json:"takes"`
	// Wins are the rounds won, as this node heard of them.
	Wins []Win `json:"wins"`
	// Scoreboard is made of the final reports of this player and of every
	// other player that sent one.
	Scoreboard []Row `json:"scoreboard"`
}

// MarshalJSON writes a record's lists as [] when they are empty (a player
// that took nothing), rather than null.
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result // the fields, without this method
	p := plain(r)
	if p.Takes == nil {
		p.Takes = []Take{}
	}
	if p.Wins == nil {
		p.Wins = []Win{}
	}
	if p.Scoreboard == nil {
		p.Scoreboard = []Row{}
	}
	return json.Marshal(p)
}

// Stop ends the player's game: it stops playing, reports its final state,
// waits up to wait for the final reports of the other players still
// around, lets go of its locks and returns its record. The node stays up.
func (p *Player) Stop(wait time.Duration) Result {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	// Pickups under way finish (or drop) before the final report.
	deadline := time.Now().Add(PickTime + 2*time.Second)
	for p.busy() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	p.mu.Lock()
	p.refreshStats()
	p.me.Final, p.me.Picking = true, ""
	p.mu.Unlock()
	end := time.Now().Add(wait)
	for i := 0; ; i++ {
		p.mu.Lock()
		if i%4 == 0 {
			p.publishState() // again and again: updates are best effort
		}
		done := p.othersFinal()
		p.mu.Unlock()
		if done && i >= 8 || time.Now().After(end) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.mu.Lock()
	p.publish(message{Type: "bye", Player: p.me.Name})
	r := Result{Player: p.me.Name, Takes: slices.Clone(p.w.Takes), Wins: slices.Clone(p.w.Wins)}
	var states []State
	if !p.cfg.Watch {
		states = append(states, p.me)
	}
	for _, name := range slices.Sorted(maps.Keys(p.w.Players)) {
		if s := p.w.Players[name]; s.Final {
			states = append(states, s.State)
		}
	}
	r.Scoreboard = scoreboard(states)
	slices.SortFunc(r.Wins, func(a, b Win) int { return a.Round - b.Round })
	held := p.held
	p.held = nil
	wins := p.wins
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	for _, h := range held {
		_ = h.lease.Release()
	}
	for _, l := range wins {
		_ = l.Release()
	}
	return r
}

// busy reports whether a pickup is under way.
func (p *Player) busy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.me.Picking != ""
}

// othersFinal reports whether every other player still around has sent
// its final report; called with p.mu held.
func (p *Player) othersFinal() bool {
	for _, s := range p.w.Players {
		if !s.gone && !s.Final {
			return false
		}
	}
	return true
}

// Snapshot is what a screen shows: the world as this player sees it.
type Snapshot struct {
	Me       State
	Others   []State // by name, gone players left out
	PowerUps []PowerUp
	Picking  map[string]string
	Marks    []Mark
	Round    int
	Target   int
	Wins     []Win
	Elapsed  time.Duration
}

// Mark is a note on the arena ("taken by P3").
type Mark struct {
	X, Y int
	Text string
}

// Snapshot returns the player's view now.
func (p *Player) Snapshot() Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Snapshot{Me: p.me, Round: p.w.Round, Target: p.cfg.Target, Picking: maps.Clone(p.w.Picking),
		Wins: slices.Clone(p.w.Wins), Elapsed: time.Since(p.start)}
	for _, name := range slices.Sorted(maps.Keys(p.w.Players)) {
		if o := p.w.Players[name]; !o.gone {
			s.Others = append(s.Others, o.State)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(p.w.PowerUps)) {
		s.PowerUps = append(s.PowerUps, p.w.PowerUps[id])
	}
	for _, m := range p.w.marks {
		s.Marks = append(s.Marks, Mark{X: m.x, Y: m.y, Text: m.text})
	}
	return s
}

// Winner returns the game's winner on a scoreboard: the most rounds won,
// then the most points; false if nobody won a round.
func Winner(rows []Row) (Row, bool) {
	if len(rows) == 0 || rows[0].Wins == 0 {
		return Row{}, false
	}
	return rows[0], true
}

// StopAll stops players in parallel (a game of several players in one
// process must not wait for one another's final reports in turn).
func StopAll(players []*Player, wait time.Duration) []Result {
	out := make([]Result, len(players))
	done := make(chan struct{})
	for i, p := range players {
		go func() {
			out[i] = p.Stop(wait)
			done <- struct{}{}
		}()
	}
	for range players {
		<-done
	}
	return out
}

// Audit checks a game's records, one per player, against the rules
// mutual exclusion enforces: every power-up consumed at most once (no two
// different takes of one power-up in any record, nor across records), every
// round won by one player at the target or above, the same in every record,
// and the same final scoreboard in every record, listing every player.
func Audit(results []Result, target int) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	takes := map[string]Take{}
	winners := map[int]Win{}
	for _, r := range results {
		seen := map[string]bool{}
		for _, tk := range r.Takes {
			if seen[tk.ID] {
				fail("%s recorded power-up %s taken twice", r.Player, tk.ID)
			}
			seen[tk.ID] = true
			if other, ok := takes[tk.ID]; ok && other != tk {
				fail("power-up %s taken by %+v in one record and by %+v in another", tk.ID, other, tk)
			}
			takes[tk.ID] = tk
		}
		for _, w := range r.Wins {
			if w.Score < target {
				fail("%s records round %d won at %d, below the target %d", r.Player, w.Round, w.Score, target)
			}
			if other, ok := winners[w.Round]; ok && other != w {
				fail("round %d won by %+v in one record and by %+v in another", w.Round, other, w)
			}
			winners[w.Round] = w
		}
		if !slices.Equal(r.Scoreboard, results[0].Scoreboard) {
			fail("scoreboards differ:\n%s: %+v\n%s: %+v", r.Player, r.Scoreboard, results[0].Player, results[0].Scoreboard)
		}
		if len(r.Scoreboard) != len(results) {
			fail("%s's scoreboard has %d players, want %d", r.Player, len(r.Scoreboard), len(results))
		}
	}
	if len(takes) == 0 {
		fail("nobody took a power-up")
	}
	return errs
}
