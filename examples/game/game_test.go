package game

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/internal/localgroup"
)

// startNodes starts n nodes of one group on in-memory networks.
func startNodes(t *testing.T, mode mcnode.Mode, n int) []mcnode.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lg, err := localgroup.Start(ctx, localgroup.Options{Mode: mode, N: n, Memory: true, Protocol: "maekawa", Coterie: "grid"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lg.Close)
	return lg.Nodes
}

// must is New's player, or a panic: the tests' names are valid.
func must(p *Player, err error) *Player {
	if err != nil {
		panic(err)
	}
	return p
}

// quick speeds the game up for a test.
func quick(t *testing.T) {
	saved := []time.Duration{PickTime, StateEvery, SpawnEvery, BotStep}
	PickTime, StateEvery, SpawnEvery, BotStep = 300*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond, 40*time.Millisecond
	t.Cleanup(func() { PickTime, StateEvery, SpawnEvery, BotStep = saved[0], saved[1], saved[2], saved[3] })
}

// checkRecords fails the test for every rule the records break.
func checkRecords(t *testing.T, results []Result, target int) {
	t.Helper()
	for _, err := range Audit(results, target) {
		t.Error(err)
	}
}

// TestBotsPlayBothModes: four bots in each mode, the same code; the
// records agree.
func TestBotsPlayBothModes(t *testing.T) {
	quick(t)
	for _, mode := range []mcnode.Mode{mcnode.Multicast, mcnode.Quorum} {
		t.Run(string(mode), func(t *testing.T) {
			nodes := startNodes(t, mode, 4)
			var players []*Player
			for i, n := range nodes {
				players = append(players, must(New(n, Config{Name: fmt.Sprintf("bot%d", i+1), Bot: true, Seed: int64(i), Target: 40})))
			}
			results := Play(players, 6*time.Second, 5*time.Second)
			checkRecords(t, results, 40)
			if len(results[0].Wins) == 0 {
				t.Errorf("no round won in 6 s at target 40: %+v", results[0].Scoreboard)
			}
		})
	}
}

// TestLateJoiner: a player that joins a game already at round 12 or later
// takes the game's round. It once stayed at round 1, seeing no player and
// no power-up: everything it heard was too far ahead of its round to
// believe. It sees the players and the power-ups, plays, and every record
// agrees.
func TestLateJoiner(t *testing.T) {
	quick(t)
	nodes := startNodes(t, mcnode.Multicast, 3)
	const target = 10 // one pickup of points wins a round
	var players []*Player
	for i, n := range nodes[:2] {
		players = append(players, must(New(n, Config{Name: fmt.Sprintf("bot%d", i+1), Bot: true, Seed: int64(i), Target: target})))
	}
	for _, p := range players {
		p.Start()
	}
	for deadline := time.Now().Add(60 * time.Second); players[0].Snapshot().Round < 12; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			StopAll(players, 0)
			t.Fatalf("the game is at round %d after 60 s, want 12", players[0].Snapshot().Round)
		}
	}
	late := must(New(nodes[2], Config{Name: "late", Bot: true, Seed: 9, Target: target}))
	late.Start()
	players = append(players, late)
	var s Snapshot
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if s = late.Snapshot(); s.Round >= 12 && len(s.Others) == 2 && len(s.PowerUps) > 0 {
			break
		}
	}
	game := players[0].Snapshot().Round
	if s.Round < 12 || len(s.Others) != 2 || len(s.PowerUps) == 0 {
		t.Errorf("the game is at round %d; the player that joined is at round %d and sees %d players and %d power-ups",
			game, s.Round, len(s.Others), len(s.PowerUps))
	}
	time.Sleep(time.Second) // it plays along
	checkRecords(t, StopAll(players, 5*time.Second), target)
}

// A newcomer takes the round of the first player in the game it hears, not
// that of another newcomer (still joining, at round 1); once settled, it
// believes nothing far ahead of its round again.
func TestNewcomerSettles(t *testing.T) {
	nodes := startNodes(t, mcnode.Multicast, 1)
	p := must(New(nodes[0], Config{Name: "me", Watch: true}))
	p.receive(5, raw(message{Type: "state", State: &State{Name: "new", Round: 1, Joining: true}}))
	p.receive(6, rawState("old", 1, 1, 20))
	p.receive(6, raw(message{Type: "spawn", Round: 40}))
	if s := p.Snapshot(); s.Round != 20 || len(s.Others) != 2 {
		t.Errorf("round %d, others %+v: want round 20, new and old", s.Round, s.Others)
	}
}

// A newcomer granted the spawner lock as it joins (the last spawner left)
// spawns for the round the players it hears are at, not for round 1, which
// nobody would see.
func TestNewSpawnerTakesTheGamesRound(t *testing.T) {
	quick(t)
	StateEvery = 400 * time.Millisecond // it listens for 2*StateEvery first
	nodes := startNodes(t, mcnode.Multicast, 1)
	p := must(New(nodes[0], Config{Name: "new", Seed: 1}))
	p.Start()
	defer p.Stop(0)
	time.Sleep(100 * time.Millisecond)      // the spawner lock was free: p holds it
	p.receive(5, rawState("old", 1, 1, 12)) // a player of the game, at round 12
	var s Snapshot
	for deadline := time.Now().Add(5 * time.Second); len(s.PowerUps) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s = p.Snapshot()
	}
	if len(s.PowerUps) == 0 {
		t.Fatal("nothing spawned")
	}
	if s.Round != 12 || s.PowerUps[0].Round != 12 {
		t.Errorf("the new spawner is at round %d and spawned for round %d, want 12", s.Round, s.PowerUps[0].Round)
	}
}

// TestCrashMidPickup: a bot's node stops dead while it picks a power-up
// up (the most dangerous moment: it holds the lock). The power-up comes
// back into play, nobody consumes it twice, and the game goes on.
func TestCrashMidPickup(t *testing.T) {
	quick(t)
	nodes := startNodes(t, mcnode.Multicast, 4)
	var (
		mu      sync.Mutex
		victim  string // the power-up the crashed bot held
		crashed time.Time
		back    bool
		after   int // power-ups consumed after the crash
	)
	var players []*Player
	for i, n := range nodes {
		players = append(players, must(New(n, Config{Name: fmt.Sprintf("bot%d", i+1), Bot: true, Seed: int64(i), Target: 1000,
			OnEvent: func(e Event) {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case e.Kind == "pick" && e.Player == "bot4" && victim == "":
					victim, crashed = e.PowerUp, time.Now()
					go n.Close() // kill -9: no leave, no release
				case e.Kind == "back" && e.PowerUp == victim:
					back = true
				case e.Kind == "got" && !crashed.IsZero() && e.Player != "bot4":
					after++
				}
			}})))
	}
	for _, p := range players {
		p.Start()
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		done := back && after >= 3
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	players[3].cancel() // its node is gone: stop its goroutines
	players[3].wg.Wait()
	results := StopAll(players[:3], 5*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if victim == "" {
		t.Fatal("bot4 never picked anything up")
	}
	if !back {
		t.Errorf("power-up %s, held by the crashed bot4, never came back into play", victim)
	}
	if after < 3 {
		t.Errorf("only %d power-ups consumed after the crash: the game stalled", after)
	}
	checkRecords(t, results, 1000)
	for _, r := range results {
		for _, tk := range r.Takes {
			if tk.ID == victim && tk.Player == "bot4" {
				t.Errorf("%s records the crashed bot4 consuming %s", r.Player, victim)
			}
		}
	}
}

// TestAuditFindsBrokenRules: Audit must be able to fail.
func TestAuditFindsBrokenRules(t *testing.T) {
	board := []Row{{Name: "a", Wins: 1, Total: 40}, {Name: "b"}}
	ok := []Result{
		{Player: "a", Takes: []Take{{ID: "1.1", Player: "a", Token: 5}}, Wins: []Win{{Round: 1, Player: "a", Score: 40}}, Scoreboard: board},
		{Player: "b", Takes: []Take{{ID: "1.1", Player: "a", Token: 5}}, Wins: []Win{{Round: 1, Player: "a", Score: 40}}, Scoreboard: board},
	}
	if errs := Audit(ok, 40); len(errs) != 0 {
		t.Fatalf("sound records: %v", errs)
	}
	for name, change := range map[string]func(r []Result){
		"taken twice in one record": func(r []Result) { r[0].Takes = append(r[0].Takes, Take{ID: "1.1", Player: "b", Token: 9}) },
		"taken by two":              func(r []Result) { r[1].Takes = []Take{{ID: "1.1", Player: "b", Token: 9}} },
		"won below target":          func(r []Result) { r[0].Wins = []Win{{Round: 1, Player: "a", Score: 30}} },
		"two winners of a round":    func(r []Result) { r[1].Wins = []Win{{Round: 1, Player: "b", Score: 40}} },
		"scoreboards differ":        func(r []Result) { r[1].Scoreboard = []Row{{Name: "b"}, {Name: "a"}} },
		"a player missing":          func(r []Result) { r[0].Scoreboard, r[1].Scoreboard = board[:1], board[:1] },
		"nothing taken":             func(r []Result) { r[0].Takes, r[1].Takes = nil, nil },
	} {
		r := []Result{ok[0], ok[1]}
		change(r)
		if errs := Audit(r, 40); len(errs) == 0 {
			t.Errorf("%s: Audit found nothing", name)
		}
	}
}

// TestHostileUpdates: updates out of bounds or garbled are dropped, and
// the screen still draws.
func TestHostileUpdates(t *testing.T) {
	nodes := startNodes(t, mcnode.Multicast, 2)
	p := must(New(nodes[0], Config{Name: "me", Watch: true})) // a spectator spawns nothing itself
	p.Start()
	defer p.Stop(0)
	for _, raw := range []string{
		`{"t":"state","s":{"name":"evil","x":1000,"y":-5}}`,
		`{"t":"state","s":{"name":"","x":1,"y":1}}`,
		`{"t":"spawn","r":1,"p":[{"id":"x","kind":"prize","x":99,"y":99,"round":1}]}`,
		`{"t":"state","s":{"name":"` + strings.Repeat("n", 100) + `","x":1,"y":1}}`,
		`not json`,
		`{"t":"pick","id":"` + strings.Repeat("i", 100) + `","pl":"a","r":1}`,
	} {
		p.receive(7, []byte(raw))
	}
	s := p.Snapshot()
	if len(s.Others) != 0 || len(s.PowerUps) != 0 {
		t.Errorf("hostile updates were applied: %+v %+v", s.Others, s.PowerUps)
	}
	u := NewUI(p, make(chan Event))
	if out := u.Render(); !strings.Contains(out, "mcnode game") {
		t.Errorf("the screen does not draw:\n%s", out)
	}
	// A sound update is applied (the check can pass).
	p.receive(7, []byte(`{"t":"state","s":{"name":"ok","x":3,"y":4,"round":1}}`))
	if s := p.Snapshot(); len(s.Others) != 1 || s.Others[0].X != 3 {
		t.Errorf("a sound state was not applied: %+v", s.Others)
	}
}

// The take record stays bounded, and its index right, past MaxRecord.
func TestTakeRecordBounded(t *testing.T) {
	w := newWorld()
	for i := range MaxRecord + 5 {
		w.recordTake(Take{ID: fmt.Sprint(i), Player: "a", Token: uint64(i + 1)})
	}
	if len(w.Takes) > MaxRecord {
		t.Errorf("%d takes kept, want at most %d", len(w.Takes), MaxRecord)
	}
	for _, id := range []string{"0", fmt.Sprint(MaxRecord/10 - 1)} {
		if _, ok := w.taken(id); ok {
			t.Errorf("take %s, among the oldest, is still known", id)
		}
	}
	for _, i := range []int{MaxRecord / 10, MaxRecord + 4} {
		if tk, ok := w.taken(fmt.Sprint(i)); !ok || tk.Token != uint64(i+1) {
			t.Errorf("take %d: %+v %v", i, tk, ok)
		}
	}
	if stands, replaced := w.recordTake(Take{ID: fmt.Sprint(MaxRecord), Player: "b", Token: 1 << 40}); !stands || replaced == nil || replaced.Player != "a" {
		t.Errorf("a later holder's take after trimming: stands %v, replaced %+v", stands, replaced)
	}
}

// TestSpawnerCrash: the node that holds the spawner lock (the game's one
// decider) stops dead. The group reclaims the lock, another player's
// waiting Acquire gets it, and power-ups keep appearing, with IDs the dead
// spawner never used (a higher fencing token).
func TestSpawnerCrash(t *testing.T) {
	quick(t)
	nodes := startNodes(t, mcnode.Multicast, 3)
	var (
		mu      sync.Mutex
		first   string // the first spawner
		crashed bool
		after   []string // IDs spawned after the crash, and by whom
		got     int      // power-ups consumed after the crash
	)
	var players []*Player
	for i, n := range nodes {
		players = append(players, must(New(n, Config{Name: fmt.Sprintf("bot%d", i+1), Bot: true, Seed: int64(i), Target: 1000,
			OnEvent: func(e Event) {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case e.Kind == "spawn" && first == "":
					first = e.Player
				case e.Kind == "spawn" && crashed:
					after = append(after, e.Player+" "+e.PowerUp)
				case e.Kind == "got" && crashed:
					got++
				}
			}})))
	}
	for _, p := range players {
		p.Start()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		f := first
		mu.Unlock()
		if f != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nobody spawned")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	var dead int
	for i, p := range players {
		if p.Name() == first {
			dead = i
		}
	}
	spawned := players[dead].Snapshot().PowerUps
	nodes[dead].Close() // kill -9: no leave, no release of the spawner lock
	players[dead].cancel()
	players[dead].wg.Wait()
	mu.Lock()
	crashed = true // from here on, the dead player tells nothing
	mu.Unlock()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		done := len(after) > 0 && got >= 2
		mu.Unlock()
		if done {
			break
		}
	}
	var rest []*Player
	for i, p := range players {
		if i != dead {
			rest = append(rest, p)
		}
	}
	results := StopAll(rest, 5*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(after) == 0 || got < 2 {
		t.Fatalf("after the spawner %s died: spawned %v, %d consumed", first, after, got)
	}
	for _, s := range after {
		for _, old := range spawned {
			if strings.HasSuffix(s, " "+old.ID) {
				t.Errorf("the new spawner reused the dead one's ID %s", old.ID)
			}
		}
	}
	checkRecords(t, results, 1000)
}
