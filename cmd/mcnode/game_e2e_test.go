package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcnode/mcnode/examples/game"
	"github.com/mcnode/mcnode/internal/syncbuf"
)

// gameEnd is the last line of `mcnode game --headless --json`.
type gameEnd struct {
	Scoreboard []game.Row    `json:"scoreboard"`
	Winner     *game.Row     `json:"winner"`
	Target     int           `json:"target"`
	Nodes      []game.Result `json:"nodes"`
}

// gameOutput splits a headless JSON run's output into its events and its
// end.
func gameOutput(t *testing.T, out []byte) ([]game.Event, gameEnd) {
	t.Helper()
	var events []game.Event
	var end gameEnd
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i, line := range lines {
		if i == len(lines)-1 {
			if err := json.Unmarshal([]byte(line), &end); err != nil || end.Target == 0 {
				t.Fatalf("the last line is not the game's end (%v): %s", err, line)
			}
			break
		}
		var e game.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Kind == "" {
			t.Fatalf("line %d is not an event (%v): %s", i+1, err, line)
		}
		events = append(events, e)
	}
	return events, end
}

// TestE2EGameHeadless: `mcnode game --headless` with four bots for a minute, in each
// mode, as a script would run it: it exits 0, every power-up is taken at
// most once in every node's own record, every scoreboard is the same, and
// the winner reached the target.
func TestE2EGameHeadless(t *testing.T) {
	for _, mode := range []string{modeMulticast, modeQuorum} {
		t.Run(mode, func(t *testing.T) {
			if mode == modeMulticast && os.Geteuid() != 0 {
				t.Skip("skipped: the multicast game makes a private network namespace; run `make test` as root")
			}
			t.Parallel()
			args := []string{"game", "--headless", "--json", "--bots", "4", "--duration", "60s", "--seed", "1", "--target", "100", "--mode", mode}
			if mode == modeQuorum {
				args = append(args, "--algo", "maekawa", "--coterie", "grid")
			}
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), "MCNODE_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("mcnode game: %v\n%s\n%s", err, stderr.String(), out)
			}
			events, end := gameOutput(t, out)
			for _, err := range game.Audit(end.Nodes, end.Target) {
				t.Error(err)
			}
			if len(end.Nodes) != 4 {
				t.Errorf("%d records, want one per bot", len(end.Nodes))
			}
			if end.Winner == nil || end.Winner.Wins == 0 || len(end.Nodes[0].Wins) == 0 {
				t.Errorf("no winner in 60 s at target 100: %+v", end.Scoreboard)
			} else if !strings.Contains(string(out), `"event":"win"`) {
				t.Error("a round was won and no win event was printed")
			}
			picks, gots := 0, 0
			for _, e := range events {
				switch e.Kind {
				case "pick":
					picks++
				case "got":
					gots++
				}
			}
			if gots == 0 || gots > picks {
				t.Errorf("%d pickups started, %d consumed", picks, gots)
			}
			if t.Failed() {
				t.Logf("stderr:\n%s", stderr.String())
			}
		})
	}
}

// TestE2EGameHeadlessText: `mcnode game --headless` without --json, as a
// person reads it: one line per event, the final scoreboard, and last
// "winner: NAME SCORE" (the scoreboard's first, SCORE its points over the
// game) or "no winner"; exit status 0. In quorum mode, over TCP on
// 127.0.0.1: no namespace needed.
func TestE2EGameHeadlessText(t *testing.T) {
	var (
		event  = regexp.MustCompile(`^ *\d+\.\d{3}s \S`)
		header = regexp.MustCompile(`^ +player +wins +total +round +won +lost$`)
		row    = regexp.MustCompile(`^ +(bot\d+) +(\d+) +(\d+) +(\d+) +(\d+) +(\d+)$`)
		winner = regexp.MustCompile(`^winner: (bot\d+) (\d+)$`)
	)
	for _, tc := range []struct {
		target, duration string
		win              bool
	}{
		{"10", "10s", true},     // a pickup of points wins a round
		{"100000", "3s", false}, // out of reach
	} {
		t.Run("target "+tc.target, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "game", "--headless", "--bots", "3", "--duration", tc.duration, "--seed", "1", "--target", tc.target,
				"--mode", "quorum", "--algo", "maekawa", "--coterie", "grid")
			cmd.Env = append(os.Environ(), "MCNODE_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("mcnode game: %v\n%s\n%s", err, stderr.String(), out)
			}
			lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			end := slices.Index(lines, "final scoreboard (a round is won at "+tc.target+" points):")
			if end < 1 || len(lines) != end+6 || !header.MatchString(lines[end+1]) {
				t.Fatalf("want events, then the scoreboard's title, header and 3 rows, then the winner:\n%s", out)
			}
			for _, line := range lines[:end] {
				if !event.MatchString(line) {
					t.Errorf("not an event: %q", line)
				}
			}
			var rows [][]string
			for _, line := range lines[end+2 : end+5] {
				m := row.FindStringSubmatch(line)
				if m == nil {
					t.Fatalf("not a scoreboard row: %q", line)
				}
				rows = append(rows, m)
			}
			last := lines[end+5]
			switch m := winner.FindStringSubmatch(last); {
			case !tc.win && last != "no winner":
				t.Errorf("last line %q, want %q", last, "no winner")
			case !tc.win:
			case m == nil:
				t.Errorf("last line %q, want winner: NAME SCORE", last)
			case m[1] != rows[0][1] || m[2] != rows[0][3] || rows[0][2] == "0":
				t.Errorf("%q, and the scoreboard's first row is %q", last, rows[0][0])
			case !strings.Contains(string(out), m[1]+" wins round "):
				t.Errorf("%s won, and no win was printed", m[1])
			}
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", out, stderr.String())
			}
		})
	}
}

// player is one `mcnode game --bot` process whose output the test follows.
type player struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  []string // lines so far
	done chan error
}

func (p *player) lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.out...)
}

// startBots starts one `mcnode game --headless --bot --json` (and more
// flags) on each of the cluster's hosts, botI on host I, each playing for
// d, and follows their output.
func startBots(t *testing.T, c *cluster, d time.Duration, target int, more ...string) []*player {
	t.Helper()
	var ps []*player
	for i := range c.lan.Hosts {
		args := append([]string{"game", "--headless", "--bot", "--json", "--duration", d.String(), "--seed", fmt.Sprint(i + 1),
			"--name", fmt.Sprintf("bot%d", i), "--target", fmt.Sprint(target)}, more...)
		cmd := c.mcnode(i, args...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		stderr := &syncbuf.Buffer{}
		cmd.Stderr = stderr // written by exec's copier, read by the cleanup
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &player{cmd: cmd, done: make(chan error, 1)}
		go func() {
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 1<<20), 1<<24)
			for sc.Scan() {
				p.mu.Lock()
				p.out = append(p.out, sc.Text())
				p.mu.Unlock()
			}
			_, _ = io.Copy(io.Discard, stdout)
			p.done <- cmd.Wait()
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			if t.Failed() {
				t.Logf("bot%d:\n%s\nstderr:\n%s", i, strings.Join(p.lines(), "\n"), stderr.String())
			}
		})
		ps = append(ps, p)
		if i == 0 {
			// The first founds the group: the others must find it there,
			// or each founds its own (they join for 300 ms, and a loaded
			// host may take longer to start the first).
			deadline := time.Now().Add(20 * time.Second)
			for !strings.Contains(stderr.String(), "founded the group") {
				if time.Now().After(deadline) {
					t.Fatalf("bot0 founded no group in 20 s: %s", stderr.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	return ps
}

// nextPick waits for a "pick" event of player name among p's lines after
// the first skip, and returns the power-up and how many lines it read.
func (p *player) nextPick(name string, skip int, within time.Duration) (string, int) {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		lines := p.lines()
		for k := skip; k < len(lines); k++ {
			var e game.Event
			if json.Unmarshal([]byte(lines[k]), &e) == nil && e.Kind == "pick" && e.Player == name {
				return e.PowerUp, k + 1
			}
		}
	}
	return "", skip
}

// end waits for p's game to end and returns its events and records.
func (p *player) end(t *testing.T, name string) ([]game.Event, gameEnd) {
	t.Helper()
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not end", name)
	}
	return gameOutput(t, []byte(strings.Join(p.lines(), "\n")))
}

// TestE2EGameKillBot: four hosts each run one bot; the one on host 3 is
// killed (kill -9) while it picks a power-up up, holding its lock. The
// power-up comes back into play, the game goes on, and the survivors'
// records agree.
func TestE2EGameKillBot(t *testing.T) { gameKillBot(t) }

// TestE2EGameQuorumKillBot: the same in quorum mode, Maekawa's and Cao and
// Singhal's protocols on the majority coterie (peers from the multicast
// group): the survivors put the killed node down, take substitute quorums,
// and the game goes on.
func TestE2EGameQuorumKillBot(t *testing.T) {
	for _, algo := range []string{"maekawa", "cao-singhal"} {
		t.Run(algo, func(t *testing.T) {
			gameKillBot(t, "--mode", "quorum", "--quorum-size", "4", "--algo", algo, "--coterie", "majority")
		})
	}
}

func gameKillBot(t *testing.T, more ...string) {
	c := newCluster(t, 4, 0)
	ps := startBots(t, c, 25*time.Second, 1000, more...)
	// Kill bot3 the moment it holds a power-up's lock.
	victim, _ := ps[3].nextPick("bot3", 0, 20*time.Second)
	if victim == "" {
		t.Fatal("bot3 picked nothing up in 20 s")
	}
	if err := ps[3].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	var killedAt []int // each survivor's lines printed before the kill
	for _, p := range ps[:3] {
		killedAt = append(killedAt, len(p.lines()))
	}
	var results []game.Result
	var back bool
	gotAfter := 0
	for i, p := range ps[:3] {
		events, end := p.end(t, fmt.Sprintf("bot%d", i))
		results = append(results, end.Nodes...)
		for k, e := range events {
			// Back into play: the spawner says so once it holds the lock;
			// or, if bot3 died before its "pick" left the host (nobody took
			// the power-up out of play), a survivor picks it up.
			if e.PowerUp == victim && (e.Kind == "back" || e.Kind == "pick" && e.Player != "bot3") {
				back = true
			}
			if e.Kind == "got" && e.PowerUp == victim && e.Player == "bot3" {
				t.Errorf("bot%d: the killed bot3 consumed %s", i, victim)
			}
			if e.Kind == "got" && k >= killedAt[i] {
				gotAfter++
			}
		}
	}
	if !back {
		t.Errorf("power-up %s, held by the killed bot3, never came back into play", victim)
	}
	if gotAfter < 3 {
		t.Errorf("only %d power-ups consumed after the kill: the game stalled", gotAfter)
	}
	for _, err := range game.Audit(results, 1000) {
		t.Error(err)
	}
	for _, r := range results {
		for _, row := range r.Scoreboard {
			if row.Name == "bot3" {
				t.Errorf("%s's final scoreboard lists the killed bot3", r.Player)
			}
		}
	}
}

// TestE2EGameQuorumSize: three hosts each run `mcnode game --mode quorum
// --quorum-size 3` (listed for the game, and once always refused): the
// peers are the multicast group's members, the three play one game over
// TCP, and every record agrees.
func TestE2EGameQuorumSize(t *testing.T) {
	c := newCluster(t, 3, 0)
	ps := startBots(t, c, 8*time.Second, 1000, "--mode", "quorum", "--quorum-size", "3", "--coterie", "grid")
	var results []game.Result
	for i, p := range ps {
		_, end := p.end(t, fmt.Sprintf("bot%d", i))
		results = append(results, end.Nodes...)
	}
	if len(results) != 3 {
		t.Fatalf("%d records, want one per host", len(results))
	}
	for _, err := range game.Audit(results, 1000) {
		t.Error(err)
	}
}

// TestE2EGamePausedBot: bot3 is stopped (SIGSTOP) the moment it starts a
// pickup, for longer than its lease, three times: each time it must drop
// the power-up (the group may have handed it on), never consume it, and
// every record must agree.
func TestE2EGamePausedBot(t *testing.T) {
	c := newCluster(t, 4, 0)
	ps := startBots(t, c, 35*time.Second, 100000)
	var paused []string
	var after []int // the line after each paused pickup's "pick"
	skip := 0
	for len(paused) < 3 {
		victim, next := ps[3].nextPick("bot3", skip, 15*time.Second)
		if victim == "" {
			break
		}
		_ = ps[3].cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(3 * time.Second) // the lease is 1.5 s
		_ = ps[3].cmd.Process.Signal(syscall.SIGCONT)
		paused, after = append(paused, victim), append(after, next)
		time.Sleep(time.Second)
		skip = len(ps[3].lines())
	}
	if len(paused) == 0 {
		t.Fatal("bot3 picked nothing up")
	}
	var results []game.Result
	for i, p := range ps {
		events, end := p.end(t, fmt.Sprintf("bot%d", i))
		results = append(results, end.Nodes...)
		if i != 3 {
			continue
		}
		for k, v := range paused {
			// The first word on it after the pick is the pickup's end.
			for _, e := range events[after[k]:] {
				if e.PowerUp == v && (e.Kind == "got" || e.Kind == "drop") {
					if e.Kind == "got" {
						t.Errorf("bot3 consumed %s although it was paused past its lease mid-pickup", v)
					}
					break
				}
			}
		}
	}
	for _, err := range game.Audit(results, 100000) {
		t.Error(err)
	}
}

// TestE2EGameQuorumPausedBot: in quorum mode (Maekawa, majority coterie) a
// bot stopped (SIGSTOP) for longer than the detection time is declared
// failed by the others; its node starts anew, and it plays on in the same
// game. Its node stayed stopped for good, out of the game with no word of
// it, and the others played on without it (black-box round).
func TestE2EGameQuorumPausedBot(t *testing.T) {
	c := newCluster(t, 4, 0)
	ps := startBots(t, c, 25*time.Second, 100000, "--mode", "quorum", "--quorum-size", "4", "--algo", "maekawa", "--coterie", "majority")
	if victim, _ := ps[3].nextPick("bot3", 0, 15*time.Second); victim == "" {
		t.Fatal("bot3 picked nothing up in 15 s")
	}
	_ = ps[3].cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(3 * time.Second) // detection takes 1 s
	_ = ps[3].cmd.Process.Signal(syscall.SIGCONT)
	resumed := len(ps[3].lines())
	var results []game.Result
	gotAfter := 0
	for i, p := range ps {
		events, end := p.end(t, fmt.Sprintf("bot%d", i))
		results = append(results, end.Nodes...)
		if i == 3 {
			for _, e := range events[min(resumed, len(events)):] {
				if e.Kind == "got" && e.Player == "bot3" {
					gotAfter++
				}
			}
		}
	}
	if gotAfter == 0 {
		t.Errorf("bot3 consumed no power-up after it was stopped and continued: out of the game")
	}
	for _, r := range results {
		names := map[string]bool{}
		for _, row := range r.Scoreboard {
			names[row.Name] = true
		}
		if len(names) != 4 {
			t.Errorf("%s's final scoreboard lists %v, want the four bots", r.Player, names)
		}
	}
	for _, err := range game.Audit(results, 100000) {
		t.Error(err)
	}
}
