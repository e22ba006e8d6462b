package group

import (
	"context"
	"fmt"
)

// Update is an application state update from a member (the paper's "system
// state update"): best effort, each delivered at most once.
//
// Data is shared by every subscriber of this node (and the Event that
// carried it): read it, do not change it.
type Update struct {
	From  NodeID
	Topic string
	Data  []byte
}

// Publish multicasts an application state update to the other members, in
// one datagram. The data is at most 1024 bytes and the topic at most 128
// bytes of UTF-8 (wire.DefaultLimits' MaxUpdate and MaxName): a larger
// update is refused with an error that wraps arbiter.ErrBadUpdate, and not
// sent.
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
	type added struct {
		ch <-chan Update
		id int
	}
	a, err := ask(g, func() added {
		ch, id := g.updates.Add(topic)
		return added{ch, id}
	})
	if err != nil {
		ch := make(chan Update)
		close(ch)
		return ch, func() {}
	}
	return a.ch, func() {
		_, _ = ask(g, func() struct{} {
			g.updates.Remove(a.id)
			return struct{}{}
		})
	}
}

func (g *Group) publishLocal(e Event) {
	g.stats.UpdatesDropped += uint64(g.updates.Deliver(e.Topic, Update{From: e.Node, Topic: e.Topic, Data: e.Data}))
}
