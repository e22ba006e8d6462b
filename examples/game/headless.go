package game

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// Log writes a game's events and its end, as lines of text or of JSON.
type Log struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
}

// NewLog returns a log that writes to w, JSON lines if asJSON.
func NewLog(w io.Writer, asJSON bool) *Log { return &Log{w: w, json: asJSON} }

// Event writes what a player did itself (news of others is left to the
// player it is about).
func (l *Log) Event(e Event) {
	if e.Heard {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.json {
		b, _ := json.Marshal(e)
		fmt.Fprintf(l.w, "%s\n", b)
		return
	}
	fmt.Fprintln(l.w, e)
}

// End writes the final scoreboard (the first record's: every player's
// should be the same) and the winner, then, in JSON, every record.
func (l *Log) End(target int, results []Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var rows []Row
	if len(results) > 0 {
		rows = results[0].Scoreboard
	}
	win, ok := Winner(rows)
	if l.json {
		// Empty lists as [], not null, as in each Result.
		if rows == nil {
			rows = []Row{}
		}
		if results == nil {
			results = []Result{}
		}
		end := struct {
			Scoreboard []Row    `json:"scoreboard"`
			Winner     *Row     `json:"winner"`
			Target     int      `json:"target"`
			Nodes      []Result `json:"nodes"`
		}{rows, nil, target, results}
		if ok {
			end.Winner = &win
		}
		b, _ := json.Marshal(end)
		fmt.Fprintf(l.w, "%s\n", b)
		return
	}
	fmt.Fprintf(l.w, "final scoreboard (a round is won at %d points):\n", target)
	fmt.Fprintf(l.w, "  %-10s %5s %6s %6s %5s %5s\n", "player", "wins", "total", "round", "won", "lost")
	for _, r := range rows {
		fmt.Fprintf(l.w, "  %-10s %5d %6d %6d %5d %5d\n", r.Name, r.Wins, r.Total, r.Score, r.Won, r.Lost)
	}
	if ok {
		fmt.Fprintf(l.w, "winner: %s %d\n", win.Name, win.Total)
	} else {
		fmt.Fprintln(l.w, "no winner")
	}
}

// Play starts the players, lets them play for d, and stops them all,
// waiting up to wait for one another's final reports.
func Play(players []*Player, d, wait time.Duration) []Result {
	for _, p := range players {
		p.Start()
	}
	time.Sleep(d)
	return StopAll(players, wait)
}
