package main

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/node"
	"github.com/mcnode/mcnode/quorumfallback/qnet"
	"github.com/mcnode/mcnode/wire"
)

// maxQueueLabels bounds the lock names the queue-length metric carries:
// the locks with the longest queues, so that a daemon serving a million
// lock names does not make a million time series.
const maxQueueLabels = 32

// metrics is the daemon's Prometheus collector. Most of what it reports is
// read from the node's status at each scrape (the runtime counts anyway);
// the acquire latencies of the locks the daemon serves are observed as they
// happen.
type metrics struct {
	node    *joining
	acquire prometheus.Histogram
	reg     *prometheus.Registry
}

func newMetrics(j *joining) *metrics {
	m := &metrics{node: j, reg: prometheus.NewRegistry()}
	m.acquire = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "mcnode_acquire_seconds",
		Help: "Time from a local client's lock request to the grant, for the locks this daemon served.",
		// 100 us (an idle group on one host) to 10 s (a long queue).
		Buckets: prometheus.ExponentialBucketsRange(100e-6, 10, 16),
	})
	m.reg.MustRegister(m.acquire, m)
	j.acquired = func(d time.Duration) { m.acquire.Observe(d.Seconds()) }
	return m
}

// serve listens on addr and serves /metrics until the listener closes.
// The listener is opened here, before the daemon joins, so that a bad
// address is an error at once.
func (m *metrics) serve(addr string, log zerolog.Logger) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	// A metric that cannot be gathered is left out of the scrape, not the
	// scrape failed.
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, net.ErrClosed) {
			log.Error().Err(err).Msg("metrics server stopped")
		}
	}()
	log.Info().Str("url", "http://"+l.Addr().String()+"/metrics").Msg("serving metrics")
	return l, nil
}

// Describe sends nothing: the collector is unchecked, since its label
// values (datagram classes, drop reasons, lock names) are only known when
// it collects.
func (m *metrics) Describe(chan<- *prometheus.Desc) {}

// Collect reads the node's status and reports it.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	c := collector{ch: ch}
	var d daemonNode
	ok := false
	if n := m.node.ready.Load(); n != nil {
		d, ok = (*n).(daemonNode)
	}
	c.gauge("mcnode_up", "1 once the daemon's node is a member of its group (multicast) or running (quorum), else 0.", b2f(ok))
	if !ok {
		// A node that joins has counts already: what it received and
		// dropped tells why it is not a member yet (a stale key, say).
		if p := m.node.pending.Load(); p != nil {
			if st, err := p.status(); err == nil {
				c.multicastCounts(st)
			}
		}
		return
	}
	switch rt := mcnode.Unwrap(d.Locker).(type) {
	case *group.Group:
		if st, err := rt.Status(); err == nil {
			c.multicast(st)
		}
	case *node.Node:
		if st, err := rt.Status(); err == nil {
			c.quorum(st)
		}
	}
}

// collector writes metrics to one scrape's channel.
type collector struct{ ch chan<- prometheus.Metric }

func (c collector) metric(t prometheus.ValueType, name, help string, v float64, labels ...string) {
	var keys, values []string
	for i := 0; i+1 < len(labels); i += 2 {
		// A label value must be UTF-8 (a group or lock name may not be):
		// one that is not would fail the whole scrape.
		keys, values = append(keys, labels[i]), append(values, strings.ToValidUTF8(labels[i+1], "\uFFFD"))
	}
	if m, err := prometheus.NewConstMetric(prometheus.NewDesc(name, help, keys, nil), t, v, values...); err == nil {
		c.ch <- m
	}
}

func (c collector) counter(name, help string, v uint64, labels ...string) {
	c.metric(prometheus.CounterValue, name, help, float64(v), labels...)
}

func (c collector) gauge(name, help string, v float64, labels ...string) {
	c.metric(prometheus.GaugeValue, name, help, v, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Help texts of the metrics both modes report.
const (
	helpInfo     = "The node's mode, protocol and group (always 1)."
	helpGrants   = "Locks granted to this node."
	helpReleases = "Releases of this node's locks."
	helpDropped  = "Datagrams or messages dropped, by reason."
	helpMembers  = "Members of the group as this node sees them (quorum mode: the fixed peers)."
	helpQuorum   = "1 if this node reaches what it needs to take locks: a majority of the group (multicast), the nodes its requests ask with this incarnation admitted (quorum)."
	helpSentB    = "Bytes sent: datagrams (multicast; a multicast counts once), frames with their length prefixes (quorum)."
	helpRecvB    = "Bytes received: every datagram, dropped ones too (multicast), frames with their length prefixes (quorum)."
)

func (c collector) multicast(st group.Status) {
	c.multicastCounts(st)
	c.multicastGroup(st)
}

// multicastCounts reports the node's info and counters: all a node that is
// not a member yet has to say (its gauges would speak of a group it is not
// in).
func (c collector) multicastCounts(st group.Status) {
	c.gauge("mcnode_info", helpInfo, 1, "mode", string(mcnode.Multicast), "protocol", "rotating-arbiter", "group", st.Group)
	for _, class := range wire.Classes {
		c.counter("mcnode_datagrams_sent_total", "Datagrams sent, by class (a multicast counts once).", st.Stats.Sent[class], "class", string(class))
		c.counter("mcnode_datagrams_received_total", "Datagrams received that decoded, by class.", st.Stats.ReceivedBy[class], "class", string(class))
		c.counter("mcnode_datagram_sent_bytes_total", "Bytes of the datagrams sent, by class, as they went out (sealed, with a key).", st.Stats.SentBytesBy[class], "class", string(class))
		c.counter("mcnode_datagram_received_bytes_total", "Bytes of the datagrams received that decoded, by class, as they came.", st.Stats.ReceivedBytesBy[class], "class", string(class))
	}
	c.counter("mcnode_sent_bytes_total", helpSentB, st.Stats.SentBytes)
	c.counter("mcnode_received_bytes_total", helpRecvB, st.Stats.ReceivedBytes)
	c.counter("mcnode_datagrams_filtered_total", "Multicast datagrams addressed to other members (their requests and releases), dropped unread by the socket filter.", st.Stats.Filtered)
	for _, reason := range slices.Sorted(maps.Keys(st.Stats.Drops)) {
		c.counter("mcnode_dropped_total", helpDropped, st.Stats.Drops[reason], "reason", reason)
	}
	c.counter("mcnode_grants_total", helpGrants, st.Stats.Entries)
	c.counter("mcnode_releases_total", helpReleases, st.Stats.Releases)
	c.counter("mcnode_server_turns_total", "Times the server role came to this node.", st.Stats.ServerTurns)
	c.counter("mcnode_view_changes_total", "Members joined, left or removed, as this node saw it.", st.Stats.ViewChanges)
	c.counter("mcnode_takeover_claims_total", "Takeovers this node started (the server fell silent).", st.Stats.Machine.Claims)
	c.counter("mcnode_takeovers_total", "Takeovers this node won.", st.Stats.Machine.Takeovers)
	c.counter("mcnode_rejoins_total", "Times this node was removed and rejoined.", st.Stats.Rejoins)
}

// multicastGroup reports a member's gauges: the group as it sees it.
func (c collector) multicastGroup(st group.Status) {
	c.gauge("mcnode_members", helpMembers, float64(len(st.Members)))
	c.gauge("mcnode_observers", "Members that do not vote (mcnode lock without a daemon), among mcnode_members.", float64(st.Quorum.Observers))
	c.gauge("mcnode_epoch", "The epoch of this node's log (each takeover begins one).", float64(st.Epoch))
	c.gauge("mcnode_timestamp", "The group timestamp T this node has reached.", float64(st.T))
	c.gauge("mcnode_server", "1 if this node is the server now.", b2f(st.IsServer))
	c.gauge("mcnode_quorum_held", helpQuorum, b2f(st.Quorum.Held))
	c.gauge("mcnode_lease_remaining_seconds", "How long this node's lease has left unless renewed.", st.LeaseLeft.Seconds())
	held, waiting := 0, 0
	for _, r := range st.Resources {
		waiting += len(r.Queue)
		if r.Holder != 0 {
			held++
		}
	}
	c.gauge("mcnode_locks_held", "Locks held in the group.", float64(held))
	c.gauge("mcnode_lock_waiters", "Requests waiting in the group's lock queues.", float64(waiting))
	queued := slices.Clone(st.Resources)
	queued = slices.DeleteFunc(queued, func(r group.ResourceInfo) bool { return len(r.Queue) == 0 })
	slices.SortFunc(queued, func(a, b group.ResourceInfo) int {
		return cmp.Or(cmp.Compare(len(b.Queue), len(a.Queue)), cmp.Compare(a.Name, b.Name))
	})
	for _, r := range queued[:min(len(queued), maxQueueLabels)] {
		c.gauge("mcnode_lock_queue_length", "Requests waiting for a lock, for the "+strconv.Itoa(maxQueueLabels)+" locks with the longest queues.",
			float64(len(r.Queue)), "lock", r.Name)
	}
}

func (c collector) quorum(st node.Status) {
	c.gauge("mcnode_info", helpInfo, 1, "mode", string(mcnode.Quorum), "protocol", st.Setup.Protocol, "group", st.Group)
	for k := range q.Kinds {
		if !k.Valid() {
			continue
		}
		c.counter("mcnode_messages_sent_total", "Protocol messages sent, by kind.", st.Stats.Sent[k], "kind", k.String())
		c.counter("mcnode_messages_received_total", "Protocol messages received, by kind.", st.Stats.Received[k], "kind", k.String())
	}
	c.counter("mcnode_updates_sent_total", "Application updates sent (one per peer).", st.Stats.UpdatesSent)
	c.counter("mcnode_updates_received_total", "Application updates received.", st.Stats.UpdatesReceived)
	c.counter("mcnode_dropped_total", helpDropped, st.Stats.Rejected, "reason", "rejected")
	c.counter("mcnode_grants_total", helpGrants, st.Stats.Entries)
	c.counter("mcnode_releases_total", helpReleases, st.Stats.Releases)
	c.gauge("mcnode_members", helpMembers, float64(len(st.Peers)))
	c.gauge("mcnode_locks_held_here", "Locks this node holds.", float64(len(st.Held)))
	c.gauge("mcnode_quorum_held", helpQuorum, b2f(st.Reachable))
	for i, l := range st.Links {
		if i != st.Self {
			peer := strconv.Itoa(i)
			c.gauge("mcnode_link_up", "1 if the link to the peer (its index in --peers) is up and its hello accepted.", b2f(l.Up), "peer", peer)
			c.gauge("mcnode_link_queued_frames", "Frames waiting to be written to the peer.", float64(l.Queued), "peer", peer)
		}
	}
	if st.Net != nil {
		c.links(*st.Net)
	}
}

// links reports the TCP mesh's counters (quorum mode).
func (c collector) links(s qnet.Stats) {
	var sent, received uint64
	for k := q.Request; k <= q.Update; k++ {
		kind := k.String()
		c.counter("mcnode_frames_sent_total", "Frames written to the links, by kind (update: application updates).", s.SentFrames[k], "kind", kind)
		c.counter("mcnode_frames_received_total", "Frames received from the links, by kind.", s.RecvFrames[k], "kind", kind)
		c.counter("mcnode_frame_sent_bytes_total", "Bytes of the frames written to the links, by kind, length prefixes included.", s.SentBytes[k], "kind", kind)
		c.counter("mcnode_frame_received_bytes_total", "Bytes of the frames received from the links, by kind, length prefixes included.", s.RecvBytes[k], "kind", kind)
	}
	// Every kind counts towards the totals, one the mesh might carry
	// beyond those listed too.
	for _, n := range s.SentBytes {
		sent += n
	}
	for _, n := range s.RecvBytes {
		received += n
	}
	c.counter("mcnode_sent_bytes_total", helpSentB, sent)
	c.counter("mcnode_received_bytes_total", helpRecvB, received)
	// Reported even at zero, unlike multicast mode's drops: the set is
	// small and fixed, and a series that exists from the start is one a
	// rate() can alert on.
	for _, d := range linkDrops(s) {
		c.counter("mcnode_dropped_total", helpDropped, d.n, "reason", d.reason)
	}
	c.counter("mcnode_link_frames_lost_total", "Frames in writes that failed when a link broke (some may have arrived).", s.Lost)
	c.counter("mcnode_link_reconnects_total", "Links that broke and were dialled again.", s.Reconnects)
	c.counter("mcnode_hellos_refused_total", "This node's hellos its peers refused (another setup, or this node restarted).", s.RefusedByPeer)
}
