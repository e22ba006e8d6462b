package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcnode/mcnode/examples/game"
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

// TestE2EGameHeadless: `mcnode game --headless` with four bots, in each
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
			args := []string{"game", "--headless", "--json", "--bots", "4", "--duration", "30s", "--seed", "1", "--target", "60", "--mode", mode}
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
				t.Errorf("no winner in 30 s at target 60: %+v", end.Scoreboard)
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

// TestE2EGameKillBot: four hosts each run one bot; the one on host 3 is
// killed (kill -9) while it picks a power-up up, holding its lock. The
// power-up comes back into play, the game goes on, and the survivors'
// records agree.
func TestE2EGameKillBot(t *testing.T) {
	c := newCluster(t, 4, 0)
	var ps []*player
	for i := range 4 {
		cmd := c.mcnode(i, "game", "--headless", "--bot", "--json", "--duration", "25s", "--seed", fmt.Sprint(i+1),
			"--name", fmt.Sprintf("bot%d", i), "--target", "1000", "--state-dir", "none")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
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
			_ = cmd.Process.Kill()
			if t.Failed() {
				t.Logf("bot%d:\n%s\nstderr:\n%s", i, strings.Join(p.lines(), "\n"), stderr.String())
			}
		})
		ps = append(ps, p)
		time.Sleep(300 * time.Millisecond) // the first founds the group
	}
	// Kill bot3 the moment it holds a power-up's lock.
	var victim string
	deadline := time.Now().Add(20 * time.Second)
	for victim == "" && time.Now().Before(deadline) {
		for _, line := range ps[3].lines() {
			var e game.Event
			if json.Unmarshal([]byte(line), &e) == nil && e.Kind == "pick" && e.Player == "bot3" {
				victim = e.PowerUp
				break
			}
		}
		if victim == "" {
			time.Sleep(5 * time.Millisecond)
		}
	}
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
		select {
		case err := <-p.done:
			if err != nil {
				t.Fatalf("bot%d: %v", i, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("bot%d did not end", i)
		}
		lines := p.lines()
		events, end := gameOutput(t, []byte(strings.Join(lines, "\n")))
		results = append(results, end.Nodes...)
		for k, e := range events {
			if e.Kind == "back" && e.PowerUp == victim {
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
