package node

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/qnet"
)

// Update is an application state update from another node, as the
// multicast mode's group.Update: it travels over the same TCP links as the
// protocol's messages, one copy to each peer, so it is delivered in order
// from each sender while the link is up, and not sent to a peer whose link
// is down or far behind.
type Update struct {
	From  q.ID
	Topic string
	Data  []byte
}

// ErrBadUpdate wraps Publish's errors for a topic or data the links cannot
// carry.
var ErrBadUpdate = errors.New("node: bad update")

// MaxBacklog is how many frames may wait for a peer before an update to it
// is dropped rather than queued: a peer that is slow or stopped reading
// must not make this node hold an ever longer queue of updates.
const MaxBacklog = 4096

// backlogged is what a transport that can tell says of a peer.
type backlogged interface {
	Backlog(to int) (up bool, queued int)
}

// Publish sends an application state update to every other node whose link
// is up (an update is not queued for a peer that is down, nor for one with
// MaxBacklog frames waiting: it is dropped and counted). The topic is at
// most MaxName bytes of UTF-8 and the data at most qnet.MaxData bytes; a
// larger one is refused, as in multicast mode.
func (n *Node) Publish(topic string, data []byte) error {
	switch {
	case len(topic) > MaxName || !utf8.ValidString(topic):
		return fmt.Errorf("%w: topic %.20q...: want at most %d bytes of UTF-8", ErrBadUpdate, topic, MaxName)
	case len(data) > qnet.MaxData:
		return fmt.Errorf("%w: %d bytes of data, want at most %d", ErrBadUpdate, len(data), qnet.MaxData)
	}
	d := string(data)
	bl, canTell := n.tr.(backlogged)
	return n.call(context.Background(), func() {
		for to := range n.cfg.Peers {
			if to == n.cfg.Self {
				continue
			}
			if canTell {
				if up, queued := bl.Backlog(to); !up || queued >= MaxBacklog {
					n.stats.UpdatesUnsent++
					continue
				}
			}
			f := qnet.Frame{Resource: topic, Data: d,
				Msg: q.Message{Kind: q.Update, From: n.cfg.Self, To: to, Arbiter: n.cfg.Self, Site: q.None}}
			if err := n.tr.Send(to, f); err != nil {
				n.log.Debug().Err(err).Int("to", to).Msg("update not sent")
				continue
			}
			n.stats.UpdatesSent++
		}
	})
}

// Subscribe returns the updates other nodes publish on topic ("" for all
// topics), and a function that ends the subscription. Updates not read in
// time are dropped (and counted in Stats). The channel is closed when the
// subscription or the node ends.
func (n *Node) Subscribe(topic string) (<-chan Update, func()) {
	var ch <-chan Update
	var id int
	if err := n.call(context.Background(), func() { ch, id = n.updates.Add(topic) }); err != nil {
		closed := make(chan Update)
		close(closed)
		return closed, func() {}
	}
	return ch, func() { _ = n.call(context.Background(), func() { n.updates.Remove(id) }) }
}

// deliver hands an update received to the subscriptions that want it.
func (n *Node) deliver(in qnet.Inbound) {
	n.stats.UpdatesReceived++
	u := Update{From: in.From, Topic: in.Frame.Resource, Data: []byte(in.Frame.Data)}
	n.stats.UpdatesDropped += uint64(n.updates.Deliver(u.Topic, u))
}
