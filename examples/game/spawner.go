package game

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mcnode/mcnode"
)

// spawner waits for the spawner lock and, while it holds it, keeps the
// arena stocked. If the lease is lost it asks again.
func (p *Player) spawner() {
	for p.ctx.Err() == nil {
		lease, err := p.node.Acquire(p.ctx, "spawner")
		if err != nil {
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(time.Second): // not a member yet, say: try again
			}
			continue
		}
		if p.listenFirst(lease) {
			p.spawn(lease)
		}
		_ = lease.Release()
	}
}

// listenFirst: a newcomer granted the spawner lock before it has heard
// which round the game is at (the lock was free as it joined: the last
// spawner left) listens first, until every player in the game has
// reported its state twice, so as not to spawn for round 1 in a game at
// round 12, where nobody would see it. Then the spawner's round is the
// game's. It reports false if the game or the lease ended meanwhile.
func (p *Player) listenFirst(lease mcnode.Lease) bool {
	p.mu.Lock()
	settled := p.settled
	p.mu.Unlock()
	if wait := time.Until(p.start.Add(2 * StateEvery)); !settled && wait > 0 {
		select {
		case <-p.ctx.Done():
			return false
		case <-lease.Lost():
			return false
		case <-time.After(wait):
		}
	}
	p.mu.Lock()
	p.settle(p.w.Round)
	p.mu.Unlock()
	return true
}

// spawn is the spawner's work while it holds the lock.
func (p *Player) spawn(lease mcnode.Lease) {
	t := time.NewTicker(SpawnEvery)
	defer t.Stop()
	seq := 0
	for {
		p.mu.Lock()
		back := p.reclaimable()
		p.mu.Unlock()
		var returned []string
		for _, pu := range back {
			if p.takeBack(pu) {
				returned = append(returned, pu.ID)
			}
		}
		var events []Event
		p.mu.Lock()
		if !p.stopped {
			for len(p.w.PowerUps)+len(p.w.Picking) < InPlay {
				x, y, ok := p.freeCell()
				if !ok {
					break // the arena is full
				}
				seq++
				pu := PowerUp{ID: fmt.Sprintf("%d.%d", lease.Token(), seq), Kind: p.kind(), X: x, Y: y, Round: p.w.Round}
				p.w.PowerUps[pu.ID], p.known[pu.ID] = pu, pu
				events = append(events, Event{Kind: "spawn", Player: p.me.Name, PowerUp: pu.ID, Of: pu.Kind})
			}
			list := slices.Collect(maps.Values(p.w.PowerUps))
			slices.SortFunc(list, func(a, b PowerUp) int { return strings.Compare(a.ID, b.ID) })
			p.publish(message{Type: "spawn", Round: p.w.Round, PowerUps: list, Back: returned})
		}
		for _, id := range returned {
			events = append(events, Event{Kind: "back", Player: p.me.Name, PowerUp: id, Of: p.known[id].Kind})
		}
		p.mu.Unlock()
		for _, e := range events {
			p.event(e)
		}
		select {
		case <-p.ctx.Done():
			return
		case <-lease.Lost():
			return
		case <-t.C:
		}
	}
}

// reclaimable lists the power-ups whose pickers are gone, gave them up,
// or no longer report picking them up: each goes back into play once this
// node can take its lock (takeBack). Called with p.mu held.
func (p *Player) reclaimable() []PowerUp {
	var out []PowerUp
	candidate := func(id string) {
		pu, known := p.known[id]
		if _, done := p.w.taken(id); known && !done {
			out = append(out, pu)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(p.w.Picking)) {
		who := p.w.Picking[id]
		s, ok := p.w.Players[who]
		switch {
		case who == p.me.Name:
		case !ok || s.gone:
			candidate(id)
		case s.Picking != id && s.at.After(p.pickedAt[id].Add(2*StateEvery)):
			// Its reports since have not shown it picking this up: its
			// report that it gave up was lost.
			candidate(id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(p.dropped)) {
		if _, picking := p.w.Picking[id]; !picking {
			candidate(id)
		}
	}
	return out
}

// takeBack puts a dead picker's power-up back into play once the group has
// reclaimed its lock: this node getting the lock proves it.
func (p *Player) takeBack(pu PowerUp) bool {
	ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
	defer cancel()
	lease, err := p.node.TryAcquire(ctx, "pu/"+pu.ID)
	if err != nil {
		return false // still held: the picker's lease has not run out yet
	}
	defer lease.Release()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, done := p.w.taken(pu.ID); done || p.w.Round != pu.Round {
		return false
	}
	delete(p.w.Picking, pu.ID)
	delete(p.dropped, pu.ID)
	p.w.PowerUps[pu.ID] = pu
	return true
}

// kind draws a power-up's kind: points mostly, health often, a prize
// rarely; called with p.mu held.
func (p *Player) kind() Kind {
	switch r := p.rng.Intn(100); {
	case r < 8:
		return Prize
	case r < 40:
		return Health
	}
	return Points
}

// freeCell draws a cell with no power-up and no player on it, and false if
// there is none; called with p.mu held.
func (p *Player) freeCell() (int, int, bool) {
	taken := map[[2]int]bool{{p.me.X, p.me.Y}: true}
	for _, pu := range p.w.PowerUps {
		taken[[2]int{pu.X, pu.Y}] = true
	}
	for _, s := range p.w.Players {
		if !s.gone {
			taken[[2]int{s.X, s.Y}] = true
		}
	}
	if len(taken) >= Width*Height {
		return 0, 0, false
	}
	for {
		// At most MaxPlayers+InPlay+1 of the cells are taken: a draw
		// finds a free one nine times in ten.
		x, y := p.rng.Intn(Width), p.rng.Intn(Height)
		if !taken[[2]int{x, y}] {
			return x, y, true
		}
	}
}

// bot plays: it heads for the nearest power-up, for health first when low,
// with a random step now and then.
func (p *Player) bot() {
	for {
		p.mu.Lock()
		wait := BotStep + time.Duration(p.rng.Int63n(int64(BotStep)/2+1))
		dx, dy := p.botMove()
		p.mu.Unlock()
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(wait):
		}
		if dx != 0 || dy != 0 {
			p.Move(dx, dy)
		}
	}
}

// BotStep is a bot's time between moves.
var BotStep = 150 * time.Millisecond

// botMove chooses the bot's next step; called with p.mu held.
func (p *Player) botMove() (int, int) {
	if p.rng.Intn(10) == 0 {
		return p.rng.Intn(3) - 1, p.rng.Intn(3) - 1
	}
	best, dist := PowerUp{}, -1
	for _, id := range slices.Sorted(maps.Keys(p.w.PowerUps)) {
		pu := p.w.PowerUps[id]
		d := abs(pu.X-p.me.X) + abs(pu.Y-p.me.Y)
		switch {
		case p.me.Health < 40 && pu.Kind == Health:
			d -= Width + Height // health first when low
		case pu.Kind == Prize:
			d -= 8
		}
		if best.ID == "" || d < dist {
			best, dist = pu, d
		}
	}
	if best.ID == "" {
		return p.rng.Intn(3) - 1, p.rng.Intn(3) - 1
	}
	dx, dy := sign(best.X-p.me.X), sign(best.Y-p.me.Y)
	if dx != 0 && dy != 0 {
		if p.rng.Intn(2) == 0 {
			dx = 0
		} else {
			dy = 0
		}
	}
	return dx, dy
}

func abs(x int) int { return max(x, -x) }

func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}
