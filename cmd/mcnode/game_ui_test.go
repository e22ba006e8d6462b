package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcnode/mcnode/examples/game"
)

// screen is a tmux session running the game on an 80x24 terminal.
type screen struct {
	t      *testing.T
	socket string
}

func (s *screen) tmux(args ...string) string {
	s.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", s.socket}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %v: %v: %s", args, err, out)
	}
	return string(out)
}

// capture returns the screen's text, one string per row.
func (s *screen) capture() []string {
	return strings.Split(s.tmux("capture-pane", "-p", "-t", "game"), "\n")
}

// arena finds the player (@) and the power-ups on a captured screen: the
// arena's rows are those between the border's corners, its cells the
// characters between the side borders.
func arena(rows []string) (me [2]int, powerUps map[[2]int]rune, ok bool) {
	powerUps = map[[2]int]rune{}
	y := -1
	found := false
	for _, row := range rows {
		r := []rune(row)
		switch {
		case len(r) > 0 && r[0] == '┌':
			y = 0
			continue
		case len(r) > 0 && r[0] == '└':
			return me, powerUps, found
		case y < 0 || len(r) < game.Width+2 || r[0] != '│':
			continue
		}
		for x, c := range r[1 : game.Width+1] {
			switch c {
			case '@':
				me, found = [2]int{x, y}, true
			case '$', '+', '*':
				powerUps[[2]int{x, y}] = c
			}
		}
		y++
	}
	return me, powerUps, false
}

var yourRow = regexp.MustCompile(`you\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/(\d+)`)

// yours reads your points and power-ups won from the side panel.
func yours(rows []string) (points, won int, ok bool) {
	for _, row := range rows {
		if m := yourRow.FindStringSubmatch(row); m != nil {
			points, _ = strconv.Atoi(m[1])
			won, _ = strconv.Atoi(m[4])
			return points, won, true
		}
	}
	return 0, 0, false
}

// TestE2EGameScreen drives the terminal game through tmux as a player
// would: the arrow keys move the player, walking onto a power-up picks it
// up, and the screen shows it gone and counted in the side panel.
func TestE2EGameScreen(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("skipped: tmux is not installed (.ci/run installs it)")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipped: the game on one host makes a private network namespace; run `make test` as root")
	}
	s := &screen{t: t, socket: fmt.Sprintf("mcnode-game-%d", os.Getpid())}
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", s.socket, "kill-server").Run() })
	// No bots: nobody else takes the power-up the test walks to.
	s.tmux("new-session", "-d", "-s", "game", "-x", "80", "-y", "24",
		fmt.Sprintf("env MCNODE_TEST_MAIN=1 GORACE=atexit_sleep_ms=0 %s game --bots 0 --seed 7 --target 1000", os.Args[0]))
	var rows []string
	var me [2]int
	var pus map[[2]int]rune
	deadline := time.Now().Add(20 * time.Second)
	for {
		rows = s.capture()
		var ok bool
		if me, pus, ok = arena(rows); ok && len(pus) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no arena with a power-up on the screen within 20 s:\n%s", strings.Join(rows, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(rows[0], "mcnode game") || !strings.Contains(strings.Join(rows, "\n"), "arrows/WASD move") {
		t.Errorf("no title or help line:\n%s", strings.Join(rows, "\n"))
	}
	// Pick the nearest power-up and walk there, checking that the first key
	// moves the player.
	var target [2]int
	best := -1
	for at := range pus {
		if d := abs(at[0]-me[0]) + abs(at[1]-me[1]); best < 0 || d < best {
			target, best = at, d
		}
	}
	kind := pus[target]
	step := func(key string, dx, dy int) {
		s.tmux("send-keys", "-t", "game", key)
		want := [2]int{me[0] + dx, me[1] + dy}
		deadline := time.Now().Add(5 * time.Second)
		for {
			time.Sleep(30 * time.Millisecond)
			got, _, ok := arena(s.capture())
			if ok && got == want {
				me = want
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("key %s: the player stayed at %v, want %v:\n%s", key, got, want, strings.Join(s.capture(), "\n"))
			}
		}
	}
	for me[0] != target[0] {
		if me[0] < target[0] {
			step("Right", 1, 0)
		} else {
			step("Left", -1, 0)
		}
	}
	for me[1] != target[1] {
		if me[1] < target[1] {
			step("Down", 0, 1)
		} else {
			step("w", 0, -1) // WASD too
		}
	}
	// On the power-up: the pickup takes PickTime, then it is gone from the
	// arena and counted in the panel.
	deadline = time.Now().Add(10 * time.Second)
	for {
		rows = s.capture()
		at, pus, ok := arena(rows)
		_, won, found := yours(rows)
		if ok && at == target && pus[target] == 0 && found && won == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after walking onto the power-up at %v, the screen shows no pickup:\n%s", target, strings.Join(rows, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	points, _, _ := yours(rows)
	if kind == '$' && points != 10 || kind == '*' && points != 50 || kind == '+' && points != 0 {
		t.Errorf("picked up %c, and the panel shows %d points", kind, points)
	}
	s.tmux("send-keys", "-t", "game", "q")
	deadline = time.Now().Add(15 * time.Second)
	for exec.Command("tmux", "-L", s.socket, "has-session", "-t", "game").Run() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("q did not end the game:\n%s", strings.Join(s.capture(), "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func abs(x int) int { return max(x, -x) }

// In a terminal, with its output redirected, the game says it needs the
// terminal and exits 2: it drew its screen into the file and played on
// unseen (black-box round).
func TestE2EGameOutputRedirected(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("skipped: tmux is not installed (.ci/run installs it)")
	}
	s := &screen{t: t, socket: fmt.Sprintf("mcnode-game-out-%d", os.Getpid())}
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", s.socket, "kill-server").Run() })
	dir := t.TempDir()
	out, status := dir+"/out", dir+"/status"
	s.tmux("new-session", "-d", "-s", "game", "-x", "80", "-y", "24",
		fmt.Sprintf("env MCNODE_TEST_MAIN=1 GORACE=atexit_sleep_ms=0 %s game --bots 1 > %s 2>&1; echo $? > %s", os.Args[0], out, status))
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(status)
		if err == nil && len(b) > 0 {
			msg, _ := os.ReadFile(out)
			if strings.TrimSpace(string(b)) != "2" || !strings.Contains(string(msg), "the game's screen needs a terminal") {
				t.Fatalf("the game with its output in a file: status %s: %s", b, msg)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the game with its output in a file did not exit within 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
