package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/internal/localgroup"
	"github.com/mcnode/mcnode/internal/netns"
	"github.com/mcnode/mcnode/seal"
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
	// MemoryNodes and MemoryLocks size the memory row: that many nodes
	// holding that many locks.
	MemoryNodes, MemoryLocks int
}

// DefaultSocketOptions returns the socket layer's defaults.
func DefaultSocketOptions() SocketOptions {
	return SocketOptions{Duration: time.Second, LightGap: time.Millisecond, Logger: zerolog.Nop(), MemoryNodes: 64, MemoryLocks: 1000}
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
			switch {
			case load == Failover:
				// Once per setup, at the smallest N: a run waits for a
				// failure to be handled, or stalls.
				if st.Keyed() || len(ns) == 0 {
					continue
				}
				n := slices.Min(ns)
				jobs = append(jobs, Job{Layer: LayerSockets, Load: load, Setup: st, N: n, run: func() Row {
					return failoverRun(st, n, opt)
				}})
			case load == Idle || load == Memory:
				// The multicast mode's upkeep: once, unkeyed.
				if !st.Multicast() || st.Keyed() {
					continue
				}
				if load == Memory {
					jobs = append(jobs, Job{Layer: LayerSockets, Load: load, Setup: st, N: opt.MemoryNodes, run: func() Row {
						return memoryRun(st, opt)
					}})
					continue
				}
				for _, n := range ns {
					jobs = append(jobs, Job{Layer: LayerSockets, Load: load, Setup: st, N: n, run: func() Row {
						return idleRun(st, n, opt)
					}})
				}
			default:
				for _, n := range ns {
					jobs = append(jobs, Job{Layer: LayerSockets, Load: load, Setup: st, N: n, run: func() Row {
						return socketRun(st, n, load, opt, *cal)
					}})
				}
			}
		}
	}
	return jobs
}

// notInNamespace is a multicast row's error outside a private namespace.
const notInNamespace = "not run: real multicast needs a private network namespace (run mcnode bench as root)"

// benchName is a group name of its own for each run of this process.
func benchName() string { return fmt.Sprintf("mcnode-bench-%d-%d", os.Getpid(), runCounter.Add(1)) }

// rowOptions is the local group of a row of st with n nodes on sockets,
// its mode and transport set in row; false, with row.Err, if it cannot run.
func rowOptions(st Setup, n int, opt SocketOptions, row *Row) (localgroup.Options, bool) {
	lo := localgroup.Options{N: n, Name: benchName(), Logger: opt.Logger}
	if !st.Multicast() {
		row.Mode, row.Transport = ModeQuorum, "tcp"
		lo.Mode, lo.Protocol, lo.Coterie = mcnode.Quorum, st.Protocol, st.Coterie
		return lo, true
	}
	row.Mode, row.Transport = ModeMulticast, "udp-multicast"
	if !netns.Inside() {
		row.Err = notInNamespace
		return lo, false
	}
	lo.Mode = mcnode.Multicast
	if st.Keyed() {
		key, err := seal.GenerateKey()
		if err != nil {
			row.Err = err.Error()
			return lo, false
		}
		lo.Keys = []seal.Key{key}
	}
	return lo, true
}

// startRow starts a row's local group, or says in row why it could not.
func startRow(lo localgroup.Options, row *Row) *localgroup.Group {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := localgroup.Start(ctx, lo)
	if err != nil {
		row.Err = err.Error()
		return nil
	}
	return c
}

// startArbiters starts n unkeyed multicast-mode nodes for an upkeep row,
// or says in row why it could not.
func startArbiters(ctx context.Context, row *Row, n int, opt SocketOptions) *localgroup.Group {
	if !netns.Inside() {
		row.Err = notInNamespace
		return nil
	}
	c, err := localgroup.Start(ctx, localgroup.Options{Mode: mcnode.Multicast, N: n, Name: benchName(), Logger: opt.Logger})
	if err != nil {
		row.Err = err.Error()
		return nil
	}
	return c
}

var runCounter atomic.Int64

func socketRun(st Setup, n int, load string, opt SocketOptions, cal Calibration) Row {
	row := Row{Layer: LayerSockets, Protocol: st.Protocol, Coterie: st.Coterie, N: n, Load: load}
	lo, ok := rowOptions(st, n, opt, &row)
	if !ok {
		return row
	}
	rtt := cal.TCP
	if st.Multicast() {
		rtt = cal.UDP
	}
	c := startRow(lo, &row)
	if c == nil {
		return row
	}
	defer c.Close()
	before, cpu0 := c.Traffic(), processCPU()
	m := localgroup.Drive(c.Nodes, localgroup.Workload{Prefix: benchResource, Duration: opt.Duration, Light: load == Light, Gap: opt.LightGap, Seed: 1}, nil)
	after, cpu1 := c.Traffic(), processCPU()
	if m.Err != nil {
		row.Err = m.Err.Error()
	}
	row.Entries = m.Entries
	if m.Entries == 0 {
		if row.Err == "" {
			row.Err = "no entries"
		}
		return row
	}
	e := float64(m.Entries)
	row.Messages = float64(after.Core-before.Core) / e
	row.Membership = float64(after.Membership-before.Membership) / e
	row.Acks = float64(after.Acks-before.Acks) / e
	row.Total = row.Messages + row.Membership
	row.Bytes = float64(after.Bytes-before.Bytes) / e
	row.RecvPerNode = float64(after.Received-before.Received) / e / float64(n)
	row.CPUPerNodeUS = micros(cpu1-cpu0) / e / float64(n)
	t := micros(rtt) / 2
	row.TUS = t
	row.LatencyP50US, row.LatencyP99US = micros(localgroup.Percentile(m.Waits, 0.5)), micros(localgroup.Percentile(m.Waits, 0.99))
	row.LatencyP50T, row.LatencyP99T = row.LatencyP50US/t, row.LatencyP99US/t
	row.PerSecond = e / m.Elapsed.Seconds()
	row.PerT = row.PerSecond * t / 1e6
	if load == Heavy {
		row.SyncDelayUS = micros(localgroup.Percentile(m.Syncs, 0.5))
		row.SyncDelayT = row.SyncDelayUS / t
	} else {
		row.CycleP50US = micros(localgroup.Percentile(m.Cycles, 0.5))
		row.RTTUS = micros(rtt)
	}
	if m.Overlaps > 0 {
		row.Err = fmt.Sprintf("%d overlapping critical sections: mutual exclusion violated", m.Overlaps)
	}
	return row
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memoryRun starts opt.MemoryNodes nodes of the multicast mode, takes
// opt.MemoryLocks locks among them and holds them, and measures what the
// process's Go heap and stacks grew by, per node. Buffers the kernel keeps
// for the sockets are not counted.
func memoryRun(st Setup, opt SocketOptions) Row {
	n := opt.MemoryNodes
	row := Row{Layer: LayerSockets, Mode: ModeMulticast, Protocol: st.Protocol, Transport: "udp-multicast", N: n, Load: Memory, Locks: opt.MemoryLocks}
	inUse := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse + m.StackInuse
	}
	before := inUse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := startArbiters(ctx, &row, n, opt)
	if c == nil {
		return row
	}
	defer c.Close()
	leases := make([]mcnode.Lease, opt.MemoryLocks)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	sem := make(chan struct{}, 64)
	for i := range leases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			l, err := c.Nodes[i%n].Acquire(ctx, fmt.Sprintf("%s-%05d", benchResource, i))
			if err != nil {
				select {
				case errs <- err:
				default:
				}
				return
			}
			leases[i] = l
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		row.Err = err.Error()
		return row
	default:
	}
	row.Entries = len(leases)
	row.MemPerNodeM = float64(int64(inUse())-int64(before)) / float64(n) / (1 << 20)
	for _, l := range leases {
		_ = l.Release()
	}
	return row
}

// idleRun starts n nodes of the multicast mode and lets them be for
// opt.Duration (after a second to settle): what they send then is the cost
// of keeping the group, per member and second.
func idleRun(st Setup, n int, opt SocketOptions) Row {
	row := Row{Layer: LayerSockets, Mode: ModeMulticast, Protocol: st.Protocol, Transport: "udp-multicast", N: n, Load: Idle}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := startArbiters(ctx, &row, n, opt)
	if c == nil {
		return row
	}
	defer c.Close()
	time.Sleep(time.Second)
	before, start := c.SentBy(), time.Now()
	time.Sleep(opt.Duration)
	after, secs := c.SentBy(), time.Since(start).Seconds()
	var total uint64
	for i := range after {
		d := after[i] - before[i]
		total += d
		row.IdleBusiest = max(row.IdleBusiest, float64(d)/secs)
	}
	row.IdlePerMember = float64(total) / secs / float64(n)
	return row
}
