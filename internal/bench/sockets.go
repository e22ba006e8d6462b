package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/internal/netns"
	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/node"
	"github.com/mcnode/mcnode/quorumfallback/qnet"
	"github.com/mcnode/mcnode/wire"
)

// SocketOptions configures the real-socket layer.
type SocketOptions struct {
	// Duration is how long each run drives its workload.
	Duration time.Duration
	// LightGap is the pause between two light-load entries, so that each
	// finds the group idle.
	LightGap time.Duration
	// Logger receives the nodes' logs (default none).
	Logger zerolog.Logger
}

// DefaultSocketOptions returns the socket layer's defaults.
func DefaultSocketOptions() SocketOptions {
	return SocketOptions{Duration: time.Second, LightGap: time.Millisecond, Logger: zerolog.Nop()}
}

// Calibration is the raw round trips on loopback that the socket layer's
// times are measured against, taken in the same run: T is half of one.
type Calibration struct {
	UDP, TCP time.Duration // median round trip of a small message, echoed
}

// Calibrate measures the raw UDP and TCP round trips on 127.0.0.1.
func Calibrate() (Calibration, error) {
	var c Calibration
	var err error
	if c.UDP, err = udpRoundTrip(2000); err != nil {
		return c, fmt.Errorf("UDP round trip: %w", err)
	}
	if c.TCP, err = tcpRoundTrip(2000); err != nil {
		return c, fmt.Errorf("TCP round trip: %w", err)
	}
	return c, nil
}

// udpRoundTrip echoes a 64-byte datagram between two sockets n times and
// returns the median.
func udpRoundTrip(n int) (time.Duration, error) {
	a, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return 0, err
	}
	defer a.Close()
	b, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return 0, err
	}
	defer b.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			k, from, err := b.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if _, err := b.WriteToUDP(buf[:k], from); err != nil {
				return
			}
		}
	}()
	msg, buf := make([]byte, 64), make([]byte, 1500)
	return measureRoundTrips(n, func() error {
		if _, err := a.WriteToUDP(msg, b.LocalAddr().(*net.UDPAddr)); err != nil {
			return err
		}
		_ = a.SetReadDeadline(time.Now().Add(time.Second))
		_, _, err := a.ReadFromUDP(buf)
		return err
	})
}

// tcpRoundTrip echoes a 64-byte message over one TCP connection n times
// and returns the median.
func tcpRoundTrip(n int) (time.Duration, error) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	msg, buf := make([]byte, 64), make([]byte, 64)
	return measureRoundTrips(n, func() error {
		if _, err := c.Write(msg); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := io.ReadFull(c, buf)
		return err
	})
}

// measureRoundTrips runs one round trip n times after a warm-up of n/10
// and returns the median.
func measureRoundTrips(n int, once func() error) (time.Duration, error) {
	for i := 0; i < n/10; i++ {
		if err := once(); err != nil {
			return 0, err
		}
	}
	rtts := make([]time.Duration, n)
	for i := range rtts {
		t0 := time.Now()
		if err := once(); err != nil {
			return 0, err
		}
		rtts[i] = time.Since(t0)
	}
	slices.Sort(rtts)
	return rtts[n/2], nil
}

// SocketJobs plans the real-socket layer: every setup at every N and load.
// The multicast runs need a private network namespace (netns.Inside); out
// of one they report why they did not run.
func SocketJobs(setups []Setup, ns []int, loads []string, opt SocketOptions, cal *Calibration) []Job {
	var jobs []Job
	for _, load := range loads {
		for _, st := range setups {
			for _, n := range ns {
				jobs = append(jobs, Job{Layer: LayerSockets, Load: load, Setup: st, N: n, run: func() Row {
					return socketRun(st, n, load, opt, *cal)
				}})
			}
		}
	}
	return jobs
}

// locker is one node of either mode, as the workload sees it.
type locker interface {
	acquire(ctx context.Context) (release func() error, err error)
}

type groupNode struct{ g *group.Group }

func (n groupNode) acquire(ctx context.Context) (func() error, error) {
	l, err := n.g.Acquire(ctx, benchResource)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

type quorumNode struct{ n *node.Node }

func (n quorumNode) acquire(ctx context.Context) (func() error, error) {
	l, err := n.n.Acquire(ctx, benchResource)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// traffic is what a group of nodes has sent so far.
type traffic struct {
	core, membership, acks, bytes float64
}

// cluster is a running group of nodes and a way to read their traffic.
type cluster struct {
	nodes   []locker
	traffic func() traffic
	close   func()
}

var runCounter atomic.Int64

func socketRun(st Setup, n int, load string, opt SocketOptions, cal Calibration) Row {
	row := Row{Layer: LayerSockets, Protocol: st.Protocol, Coterie: st.Coterie, N: n, Load: load}
	var c *cluster
	var err error
	rtt := cal.TCP
	if st.Multicast() {
		row.Mode, row.Transport, rtt = ModeMulticast, "udp-multicast", cal.UDP
		if !netns.Inside() {
			row.Err = "not run: real multicast needs a private network namespace (run mcnode bench as root)"
			return row
		}
		c, err = startMulticast(n, opt)
	} else {
		row.Mode, row.Transport = ModeQuorum, "tcp"
		c, err = startQuorum(st, n, opt)
	}
	if err != nil {
		row.Err = err.Error()
		return row
	}
	defer c.close()
	before := c.traffic()
	m := drive(c.nodes, load, opt)
	after := c.traffic()
	if m.err != nil {
		row.Err = m.err.Error()
	}
	row.Entries = m.entries
	if m.entries == 0 {
		if row.Err == "" {
			row.Err = "no entries"
		}
		return row
	}
	e := float64(m.entries)
	row.Messages = (after.core - before.core) / e
	row.Membership = (after.membership - before.membership) / e
	row.Acks = (after.acks - before.acks) / e
	row.Total = row.Messages + row.Membership
	row.Bytes = (after.bytes - before.bytes) / e
	t := micros(rtt) / 2
	row.TUS = t
	row.LatencyP50US, row.LatencyP99US = micros(time.Duration(percentile(m.waits, 0.5))), micros(time.Duration(percentile(m.waits, 0.99)))
	row.LatencyP50T, row.LatencyP99T = row.LatencyP50US/t, row.LatencyP99US/t
	row.PerSecond = e / m.elapsed.Seconds()
	row.PerT = row.PerSecond * t / 1e6
	if load == Heavy {
		row.SyncDelayUS = micros(time.Duration(percentile(m.syncs, 0.5)))
		row.SyncDelayT = row.SyncDelayUS / t
	} else {
		row.CycleP50US = micros(time.Duration(percentile(m.cycles, 0.5)))
		row.RTTUS = micros(rtt)
	}
	if m.overlaps > 0 {
		row.Err = fmt.Sprintf("%d overlapping critical sections: mutual exclusion violated", m.overlaps)
	}
	return row
}

// startMulticast joins n nodes to a fresh group on lo (inside the private
// namespace), one after another as the demo does.
func startMulticast(n int, opt SocketOptions) (*cluster, error) {
	cfg := group.DefaultLocalConfig()
	cfg.Name = fmt.Sprintf("mcnode-bench-%d-%d", os.Getpid(), runCounter.Add(1))
	cfg.Logger = opt.Logger
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var gs []*group.Group
	closeAll := func() {
		for _, g := range gs {
			_ = g.Close()
		}
	}
	for i := 0; i < n; i++ {
		g, err := group.Join(ctx, cfg)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("node %d of %d could not join: %w", i+1, n, err)
		}
		gs = append(gs, g)
	}
	c := &cluster{close: closeAll}
	for _, g := range gs {
		c.nodes = append(c.nodes, groupNode{g})
	}
	c.traffic = func() traffic {
		var t traffic
		for _, g := range gs {
			st, err := g.Status()
			if err != nil {
				continue
			}
			for class, k := range st.Stats.Sent {
				if class.Core() {
					t.core += float64(k)
				} else if class != wire.ClassUpdate {
					t.membership += float64(k)
				}
				if class == wire.ClassAck {
					t.acks += float64(k)
				}
			}
			t.bytes += float64(st.Stats.SentBytes)
		}
		return t
	}
	return c, nil
}

// startQuorum starts n quorum nodes over TCP on 127.0.0.1, each on a port
// the system picks, and waits until every link is up.
func startQuorum(st Setup, n int, opt SocketOptions) (*cluster, error) {
	base := node.Config{Group: fmt.Sprintf("mcnode-bench-%d", runCounter.Add(1)), Protocol: st.Protocol, Coterie: st.Coterie,
		Peers: make([]string, n), Logger: opt.Logger}
	listeners := make([]net.Listener, n)
	var meshes []*qnet.Mesh
	var nodes []*node.Node
	closeAll := func() {
		for _, nd := range nodes {
			_ = nd.Close()
		}
		for _, m := range meshes[len(nodes):] {
			_ = m.Close()
		}
		for _, l := range listeners[len(meshes):] {
			if l != nil {
				_ = l.Close()
			}
		}
	}
	for i := range listeners {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			closeAll()
			return nil, err
		}
		listeners[i], base.Peers[i] = l, l.Addr().String()
	}
	for i := range listeners {
		m, err := qnet.Listen(qnet.Config{Self: i, Peers: base.Peers, Hello: base.Hello(), Logger: opt.Logger, Listener: listeners[i]})
		if err != nil {
			closeAll()
			return nil, err
		}
		meshes = append(meshes, m)
	}
	for i, m := range meshes {
		cfg := base
		cfg.Self, cfg.Transport = i, m
		nd, err := node.Start(cfg)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
		nodes = append(nodes, nd)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, nd := range nodes {
		if err := nd.WaitConnected(ctx); err != nil {
			closeAll()
			return nil, fmt.Errorf("node %d: links: %w", i, err)
		}
	}
	c := &cluster{close: closeAll}
	for _, nd := range nodes {
		c.nodes = append(c.nodes, quorumNode{nd})
	}
	c.traffic = func() traffic {
		var t traffic
		for _, m := range meshes {
			s := m.Stats()
			for k := q.Request; k <= q.Transfer; k++ {
				t.core += float64(s.SentFrames[k])
				t.bytes += float64(s.SentBytes[k])
			}
		}
		return t
	}
	return c, nil
}

// measured is what one workload run saw.
type measured struct {
	entries              int
	waits, cycles, syncs []time.Duration
	overlaps             int
	elapsed              time.Duration
	err                  error
}

// drive runs the workload on the nodes for opt.Duration. Heavy load: every
// node takes the resource, releases it at once and asks again. Light load:
// one request at a time, by a random node, LightGap apart. Every entry
// checks that nobody else is inside, against one clock: the nodes share
// this process.
func drive(nodes []locker, load string, opt SocketOptions) measured {
	ctx, cancel := context.WithTimeout(context.Background(), opt.Duration+30*time.Second)
	defer cancel()
	var (
		inside   atomic.Int32
		overlaps atomic.Int64
		released atomic.Int64 // ns since start of the last release
		mu       sync.Mutex
		m        measured
	)
	start := time.Now()
	stop := start.Add(opt.Duration)
	since := func() int64 { return int64(time.Since(start)) }
	// one is one entry by node nd: it returns the wait, the whole
	// acquire-and-release cycle and, if the node asked before the last
	// release, the synchronization delay.
	one := func(nd locker) (wait, cycle, syncDelay time.Duration, err error) {
		asked := since()
		release, err := nd.acquire(ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		entered := since()
		if inside.Add(1) != 1 {
			overlaps.Add(1)
		}
		if last := released.Load(); last > 0 && asked <= last {
			syncDelay = time.Duration(entered - last)
		}
		inside.Add(-1)
		released.Store(since())
		err = release()
		return time.Duration(entered - asked), time.Duration(since() - asked), syncDelay, err
	}
	record := func(wait, cycle, syncDelay time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		m.entries++
		m.waits = append(m.waits, wait)
		m.cycles = append(m.cycles, cycle)
		if syncDelay > 0 {
			m.syncs = append(m.syncs, syncDelay)
		}
	}
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if m.err == nil {
			m.err = err
		}
	}
	if load == Heavy {
		var wg sync.WaitGroup
		for _, nd := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					wait, cycle, syncDelay, err := one(nd)
					if err != nil {
						fail(err)
						return
					}
					record(wait, cycle, syncDelay)
				}
			}()
		}
		wg.Wait()
	} else {
		rng := rand.New(rand.NewSource(1))
		for time.Now().Before(stop) {
			wait, cycle, _, err := one(nodes[rng.Intn(len(nodes))])
			if err != nil {
				fail(err)
				break
			}
			record(wait, cycle, 0)
			time.Sleep(opt.LightGap)
		}
	}
	m.elapsed = time.Since(start)
	m.overlaps = int(overlaps.Load())
	if errors.Is(m.err, context.DeadlineExceeded) {
		m.err = fmt.Errorf("a lock was not granted within %v of the run's end", 30*time.Second)
	}
	return m
}
