package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/internal/localgroup"
	"github.com/mcnode/mcnode/internal/netns"
	"github.com/mcnode/mcnode/quorumfallback/node"
	"github.com/mcnode/mcnode/wire"
)

// scrape fetches /metrics and returns every sample by its name and labels
// as written ("name" or `name{label="v"}`).
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestMetricsMove scrapes a daemon's metrics while its group works, in each
// mode: the counters move with the work, the gauges say what is true.
func TestMetricsMove(t *testing.T) {
	for _, mode := range []mcnode.Mode{mcnode.Multicast, mcnode.Quorum} {
		t.Run(string(mode), func(t *testing.T) {
			if mode == mcnode.Multicast && !netns.Isolate(t) {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			lg, err := localgroup.Start(ctx, localgroup.Options{Mode: mode, N: 3, Protocol: "maekawa", Coterie: "grid"})
			if err != nil {
				t.Fatal(err)
			}
			defer lg.Close()
			j := &joining{}
			var d locker = daemonNode{Locker: lg.Nodes[0]}
			url := ""
			// Before the node is ready, the daemon says it is not up.
			ml, err := newMetrics(j).serve("127.0.0.1:0", zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			defer ml.Close()
			url = "http://" + ml.Addr().String() + "/metrics"
			if m := scrape(t, url); m["mcnode_up"] != 0 {
				t.Errorf("mcnode_up %v before the node joined", m["mcnode_up"])
			}
			j.ready.Store(&d)
			work := func(n int) {
				for range n {
					l, err := j.acquire(ctx, "m", false)
					if err != nil {
						t.Fatal(err)
					}
					if err := l.Release(); err != nil {
						t.Fatal(err)
					}
				}
			}
			work(20)
			before := scrape(t, url)
			work(30)
			time.Sleep(200 * time.Millisecond) // the last release is recorded
			after := scrape(t, url)
			sent := "mcnode_messages_sent_total{kind=\"request\"}"
			if mode == mcnode.Multicast {
				sent = "mcnode_datagrams_sent_total{class=\"request\"}"
			}
			for _, name := range []string{"mcnode_grants_total", "mcnode_releases_total", "mcnode_acquire_seconds_count", sent} {
				if after[name] < before[name]+30 && !(name == sent && after[name] > before[name]) {
					t.Errorf("%s went from %v to %v over 30 more locks", name, before[name], after[name])
				}
			}
			if after["mcnode_up"] != 1 || after["mcnode_members"] != 3 || after["mcnode_observers"] != 0 || after["mcnode_quorum_held"] != 1 {
				t.Errorf("up %v, members %v, observers %v, quorum held %v: want 1, 3, 0 and 1", after["mcnode_up"], after["mcnode_members"], after["mcnode_observers"], after["mcnode_quorum_held"])
			}
			if _, ok := after["mcnode_observers"]; ok != (mode == mcnode.Multicast) {
				t.Errorf("mcnode_observers reported %v, want it in multicast mode only", ok)
			}
			// Bytes by class (multicast) or kind (quorum) move with the
			// datagrams or frames they count, a header's worth or more
			// each, and so do the totals.
			count, bytes, recvBytes := `mcnode_datagrams_sent_total{class="request"}`, `mcnode_datagram_sent_bytes_total{class="request"}`, `mcnode_datagram_received_bytes_total{class="decision"}`
			if mode == mcnode.Quorum {
				count, bytes, recvBytes = `mcnode_frames_sent_total{kind="request"}`, `mcnode_frame_sent_bytes_total{kind="request"}`, `mcnode_frame_received_bytes_total{kind="grant"}`
			}
			header := map[mcnode.Mode]float64{mcnode.Multicast: wire.HeaderLen, mcnode.Quorum: 4}[mode]
			if n, b := after[count]-before[count], after[bytes]-before[bytes]; n <= 0 || b < n*header {
				t.Errorf("%s moved %v, %s %v", count, n, bytes, b)
			}
			for _, name := range []string{recvBytes, "mcnode_sent_bytes_total", "mcnode_received_bytes_total"} {
				if after[name] <= before[name] {
					t.Errorf("%s went from %v to %v", name, before[name], after[name])
				}
			}
			if mode == mcnode.Quorum {
				quorumLinks(t, ctx, url, lg, after)
				return
			}
			// Two members wait for a lock node 0 holds: its queue shows.
			l, err := lg.Nodes[0].Acquire(ctx, "busy")
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range lg.Nodes[1:] {
				go func() {
					if l, err := n.Acquire(ctx, "busy"); err == nil {
						l.Release()
					}
				}()
			}
			deadline := time.Now().Add(10 * time.Second)
			for scrape(t, url)[`mcnode_lock_queue_length{lock="busy"}`] != 2 {
				if time.Now().After(deadline) {
					t.Fatalf("the queue of 2 never showed: %v", scrape(t, url))
				}
				time.Sleep(50 * time.Millisecond)
			}
			l.Release()
			for _, k := range []string{"mcnode_received_bytes_total", `mcnode_datagrams_received_total{class="decision"}`, "mcnode_timestamp", "mcnode_quorum_held"} {
				if after[k] <= 0 {
					t.Errorf("%s is %v", k, after[k])
				}
			}
			if _, ok := after["mcnode_datagrams_filtered_total"]; !ok {
				t.Errorf("no mcnode_datagrams_filtered_total")
			}
		})
	}
}

// quorumLinks checks quorum mode's link metrics: the mesh's drops are
// there from the start and count a stranger's connection, every peer's
// link is up until its node stops, and with it gone the quorum gauge says
// whether node 0's requests ask it.
func quorumLinks(t *testing.T, ctx context.Context, url string, lg *localgroup.Group, m map[string]float64) {
	for _, name := range []string{`mcnode_dropped_total{reason="unauthenticated"}`, `mcnode_dropped_total{reason="bad-sender"}`,
		`mcnode_dropped_total{reason="foreign-hello"}`, `mcnode_dropped_total{reason="restarted"}`, `mcnode_dropped_total{reason="rejected"}`,
		`mcnode_link_queued_frames{peer="1"}`, "mcnode_link_frames_lost_total", "mcnode_link_reconnects_total", "mcnode_hellos_refused_total"} {
		if _, ok := m[name]; !ok {
			t.Errorf("no %s", name)
		}
	}
	if _, ok := m[`mcnode_link_up{peer="0"}`]; ok {
		t.Errorf("node 0 has a link to itself")
	}
	n0 := mcnode.Unwrap(lg.Nodes[0]).(*node.Node)
	st, err := n0.Status()
	if err != nil {
		t.Fatal(err)
	}
	// A connection that does not open with a hello is a malformed one.
	c, err := net.Dial("tcp", st.Peers[0])
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	c.Close()
	want := map[string]float64{`mcnode_link_up{peer="1"}`: 1, `mcnode_link_up{peer="2"}`: 0, `mcnode_dropped_total{reason="malformed"}`: m[`mcnode_dropped_total{reason="malformed"}`] + 1,
		"mcnode_quorum_held": b2f(!slices.Contains(st.Quorum, 2))}
	if m[`mcnode_link_up{peer="2"}`] != 1 {
		t.Errorf("the link to node 2 is down while it runs")
	}
	lg.Nodes[2].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := scrape(t, url)
		var wrong []string
		for name, v := range want {
			if got[name] != v {
				wrong = append(wrong, fmt.Sprintf("%s %v, want %v", name, got[name], v))
			}
		}
		if len(wrong) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 2 stopped, a stranger connected: %v", wrong)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestMetricsAddrRefused(t *testing.T) {
	if _, err := newMetrics(&joining{}).serve("256.0.0.1:99999", zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Errorf("a bad address: %v", err)
	}
}

// A group name that is not UTF-8 does not fail the scrape.
func TestMetricsOddGroupName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lg, err := localgroup.Start(ctx, localgroup.Options{Mode: mcnode.Quorum, N: 2, Protocol: "ricart-agrawala", Name: "odd\xff", Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	j := &joining{}
	var d locker = daemonNode{Locker: lg.Nodes[0]}
	j.ready.Store(&d)
	ml, err := newMetrics(j).serve("127.0.0.1:0", zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Close()
	if m := scrape(t, "http://"+ml.Addr().String()+"/metrics"); m["mcnode_up"] != 1 {
		t.Errorf("mcnode_up %v", m["mcnode_up"])
	}
}
