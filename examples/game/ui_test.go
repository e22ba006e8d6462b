package game

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"

	"github.com/mcnode/mcnode"
)

// quorumStatus is a node that reports itself one of a big quorum-mode
// group: the longest lines the panel draws.
type quorumStatus struct{ mcnode.Locker }

func (quorumStatus) Status() (mcnode.Status, error) {
	st := mcnode.Status{Mode: mcnode.Quorum, Protocol: "ricart-agrawala", Coterie: "majority-of-everything", Sent: 1 << 40, Core: 1 << 30}
	for i := range 33 {
		st.Members = append(st.Members, mcnode.Member{ID: uint64(i)})
		st.Quorum = append(st.Quorum, uint64(1000+i))
	}
	return st, nil
}

// crowdedScreen is the screen of a player among n players (itself and
// n-1 others, with the longest names and big numbers), just after a round
// was won, while it picks a power-up up: the most a screen shows.
func crowdedScreen(t *testing.T, node mcnode.Locker, n int) *UI {
	t.Helper()
	p := must(New(node, Config{Name: "me", Target: 10}))
	for i := range n - 1 {
		b := raw(message{Type: "state", State: &State{Name: fmt.Sprintf("player-%09d", i), X: i % Width, Y: i % Height, Round: 1 << 29,
			Health: MaxHealth, Score: 99999, Wins: 9999, Won: 99999, Lost: 99999, P50: 1 << 40, P99: 1 << 41, Sent: 1 << 50, Core: 1 << 40}})
		p.receive(uint64(100+i), b)
	}
	// The round's winner, who then left.
	p.receive(99, rawState("the-champion-xyz", 0, 0, 1<<29))
	p.receive(99, raw(message{Type: "win", Win: &Win{Round: 1 << 29, Player: "the-champion-xyz", Score: 1 << 30}}))
	p.receive(99, raw(message{Type: "bye", Player: "the-champion-xyz"}))
	p.mu.Lock()
	p.me.Picking = "1.1"
	p.me.Score, p.me.Won, p.me.Lost = 99999, 99999, 99999
	p.mu.Unlock()
	return NewUI(p, make(chan Event))
}

var ansiCode = regexp.MustCompile("\x1b\\[[0-9;:?]*[ -/]*[@-~]")

// checkFits fails the test if the screen is taller or wider than the
// terminal, measuring the width each line takes on the terminal.
func checkFits(t *testing.T, out string, width, height int) {
	t.Helper()
	lines := strings.Split(out, "\n")
	bad := len(lines) > height
	for _, line := range lines {
		if lipgloss.Width(line) > width {
			bad = true
		}
	}
	if bad {
		var b strings.Builder
		for i, line := range lines {
			fmt.Fprintf(&b, "%2d %3d|%s\n", i+1, lipgloss.Width(line), ansiCode.ReplaceAllString(line, ""))
		}
		t.Errorf("the screen is %d lines, at most %d columns wide each, on a %dx%d terminal:\n%s", len(lines), width, width, height, b.String())
	}
}

// The screen fits MinWidth x MinHeight however many players there are,
// with the last round's winner and a pickup under way shown; the players
// that do not fit are counted. It follows the terminal's size.
func TestScreenFits(t *testing.T) {
	nodes := startNodes(t, mcnode.Multicast, 1)
	for _, node := range []mcnode.Locker{nodes[0], quorumStatus{nodes[0]}} {
		for _, n := range []int{1, 9, 33} {
			st, _ := node.Status()
			t.Run(fmt.Sprintf("%s/%d players", st.Mode, n), func(t *testing.T) {
				u := crowdedScreen(t, node, n)
				out := u.Render()
				checkFits(t, out, MinWidth, MinHeight)
				plain := ansiCode.ReplaceAllString(out, "")
				for _, want := range []string{"mcnode game", "last round: the-champion-xyz", "picking up", "arrows/WASD"} {
					if !strings.Contains(plain, want) {
						t.Errorf("no %q on the screen:\n%s", want, plain)
					}
				}
				shown := strings.Count(plain, " 99999 100 ") // every player's points and health
				var more int
				if m := regexp.MustCompile(`\+(\d+) more`).FindStringSubmatch(plain); m != nil {
					fmt.Sscan(m[1], &more)
				}
				if shown+more != n || !strings.Contains(plain, "│ me ") {
					t.Errorf("%d players shown and %d more counted, want %d with you among those shown:\n%s", shown, more, n, plain)
				}

				// Resizing: larger, then too small (a message that fits),
				// then back.
				for _, size := range []tea.WindowSizeMsg{{Width: 132, Height: 50}, {Width: 40, Height: 10}, {Width: MinWidth, Height: MinHeight}} {
					u.Update(size)
					out := u.Render()
					checkFits(t, out, size.Width, size.Height)
					full := strings.Contains(out, "mcnode game")
					if small := size.Width < MinWidth || size.Height < MinHeight; full == small {
						t.Errorf("on a %dx%d terminal, the game drawn: %v:\n%s", size.Width, size.Height, full, out)
					}
				}
			})
		}
	}
}

// In a terminal too small for the game, the message that says so is
// wrapped to its width, not cut off mid-word ("The game needs a 80x24
// termina" at 30 columns: black-box round).
func TestTooSmallMessageWraps(t *testing.T) {
	p := must(New(quorumStatus{}, Config{Name: "me"}))
	u := NewUI(p, make(chan Event))
	m, _ := u.Update(tea.WindowSizeMsg{Width: 30, Height: 10})
	out := ansiCode.ReplaceAllString(m.(*UI).Render(), "")
	checkFits(t, out, 30, 10)
	if !strings.Contains(strings.Join(strings.Fields(out), " "), fmt.Sprintf("The game needs a %dx%d terminal;", MinWidth, MinHeight)) {
		t.Errorf("at 30x10 the screen says:\n%s", out)
	}
}
