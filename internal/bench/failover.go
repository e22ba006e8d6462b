package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/protocols"
)

// failoverStall bounds a failover row's wait for the next grant: a protocol
// without failure handling never grants the lock again.
const failoverStall = 10 * time.Second

// failoverRun has every node of a group loop on one lock, kills the node
// holding it (it stops at once, as kill -9 would: no leave, no release),
// and measures the time to the next grant, to a survivor.
func failoverRun(st Setup, n int, opt SocketOptions) Row {
	row := Row{Layer: LayerSockets, Protocol: st.Protocol, Coterie: st.Coterie, N: n, Load: Failover}
	lo, ok := rowOptions(st, n, opt, &row)
	if !ok {
		return row
	}
	c := startRow(lo, &row)
	if c == nil {
		return row
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	// Once the lock flows, the next node to get it keeps it (freeze) and
	// is killed holding it: the dangerous case.
	var freeze atomic.Bool
	var victim atomic.Int64
	victim.Store(-1)
	frozen := make(chan int64, 1)
	var entries atomic.Int64
	regranted := make(chan time.Time, 1)
	for i, nd := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && victim.Load() != int64(i) {
				l, err := nd.Acquire(ctx, "failover")
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				at := time.Now()
				entries.Add(1)
				if v := victim.Load(); v >= 0 && v != int64(i) {
					select {
					case regranted <- at:
					default:
					}
				}
				if victim.Load() < 0 && freeze.CompareAndSwap(true, false) {
					frozen <- int64(i)
					<-ctx.Done() // held until killed
					return
				}
				time.Sleep(time.Millisecond)
				_ = l.Release()
			}
		}()
	}
	time.Sleep(opt.Duration / 2) // the lock flows
	freeze.Store(true)
	var v int64
	select {
	case v = <-frozen:
	case <-time.After(5 * time.Second):
		row.Err = "nobody took the lock in 5 s"
		return row
	}
	victim.Store(v)
	killed := time.Now()
	_ = c.Nodes[v].Close() // a crash: what it held is neither released nor handed on
	select {
	case at := <-regranted:
		row.FailoverMS = float64(at.Sub(killed)) / float64(time.Millisecond)
	case <-time.After(failoverStall):
		row.Err = fmt.Sprintf("no grant in %v after the holder was killed: %s", failoverStall, whyStalls(st, n))
	}
	row.Entries = int(entries.Load())
	return row
}

// whyStalls says why a quorum protocol granted nothing after a failure:
// it has no failure handling, or its coterie has no quorum without the
// dead node.
func whyStalls(st Setup, n int) string {
	f, err := protocols.NewFactory(protocols.Setup{Protocol: st.Protocol, Coterie: st.Coterie, N: n})
	if err != nil {
		return "the lock stalls"
	}
	if m, err := f.New(0); err == nil {
		if _, ok := m.(q.FaultTolerant); ok {
			if f.Coterie.Substitute(0) != nil {
				return "the lock stalls, although the coterie has substitute quorums (unexpected: please report it)"
			}
			return fmt.Sprintf("the lock stalls: the %s coterie has no substitute quorum, and the quorums that hold the dead node wait for it", st.Coterie)
		}
	}
	return "no failure handling (the lock stalls)"
}
