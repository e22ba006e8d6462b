package group

import (
	"context"
	"fmt"
	"maps"
	"slices"
)

// Update is an application state update from a member (the paper's "system
// state update"): best effort, each delivered at most once.
type Update struct {
	From  NodeID
	Topic string
	Data  []byte
}

type subscription struct {
	topic string
	ch    chan Update
}

// Publish multicasts an application state update to the other members.
func (g *Group) Publish(topic string, data []byte) error {
	if err := g.call(context.Background(), func() error { return g.node.Publish(topic, data) }); err != nil {
		return fmt.Errorf("group: publish: %w", err)
	}
	return nil
}

// Subscribe returns the updates other members publish on topic ("" for all
// topics), and a function that ends the subscription. Updates not read in
// time are dropped. The channel is closed when the subscription or the node
// ends.
func (g *Group) Subscribe(topic string) (<-chan Update, func()) {
	ch := make(chan Update, 256)
	id, err := ask(g, func() int {
		g.subSeq++
		g.subs[g.subSeq] = &subscription{topic: topic, ch: ch}
		return g.subSeq
	})
	if err != nil {
		close(ch)
		return ch, func() {}
	}
	return ch, func() {
		_, _ = ask(g, func() struct{} {
			if s, ok := g.subs[id]; ok {
				delete(g.subs, id)
				close(s.ch)
			}
			return struct{}{}
		})
	}
}

func (g *Group) publishLocal(e Event) {
	u := Update{From: e.Node, Topic: e.Topic, Data: e.Data}
	for _, id := range slices.Sorted(maps.Keys(g.subs)) {
		s := g.subs[id]
		if s.topic != "" && s.topic != u.Topic {
			continue
		}
		select {
		case s.ch <- u:
		default:
		}
	}
}
