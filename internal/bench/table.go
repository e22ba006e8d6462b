package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is a whole run: its rows, the raw round trips the socket layer
// measured, and the targets judged from them. It is also the --json output.
type Report struct {
	Command     string       `json:"command"`
	Calibration *Calibration `json:"calibration,omitempty"`
	Rows        []Row        `json:"rows"`
	Targets     []Target     `json:"targets"`
	Notes       []string     `json:"notes,omitempty"`
}

// MarshalJSON writes rows and targets as [] when there are none (a run
// that meets no target's conditions has no targets), rather than null.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report // the fields, without this method
	p := plain(r)
	if p.Rows == nil {
		p.Rows = []Row{}
	}
	if p.Targets == nil {
		p.Targets = []Target{}
	}
	return json.Marshal(p)
}

// WriteTable prints the report as tables, one per layer and load, then the
// targets.
func WriteTable(w io.Writer, rep Report) error {
	sections := []struct {
		layer, load, title string
	}{
		{LayerSim, Light, "Simulation, light load (one request at a time), fixed one-way delay T; times in T"},
		{LayerSim, Heavy, "Simulation, heavy load (every node always waiting), fixed one-way delay T; times in T"},
		{LayerSockets, Light, "Real sockets on this host, light load (one request at a time)"},
		{LayerSockets, Heavy, "Real sockets on this host, heavy load (every node always waiting), one resource"},
		{LayerSockets, Idle, "Real sockets on this host, an idle group: datagrams each member sends a second (pings, their answers, SYNCs), on average and the busiest"},
		{LayerSockets, Failover, "Real sockets on this host, every node looping on one lock: its holder killed (kill -9), the time to the next grant"},
		{LayerSockets, Memory, "Memory per node: N nodes in this process holding locks; the Go heap and stacks they take, divided by N (socket buffers, kept by the kernel, apart)"},
	}
	var b strings.Builder
	for _, sec := range sections {
		var rows []Row
		for _, r := range rep.Rows {
			if r.Layer == sec.layer && r.Load == sec.load {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s\n", sec.title)
		if sec.layer == LayerSockets && rep.Calibration != nil {
			c := rep.Calibration
			fmt.Fprintf(&b, "raw round trip on loopback: UDP %.1f µs (T = %.1f µs), TCP %.1f µs (T = %.1f µs)\n",
				micros(c.UDP), micros(c.UDP)/2, micros(c.TCP), micros(c.TCP)/2)
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, header(sec.layer, sec.load))
		for _, r := range rows {
			fmt.Fprintln(tw, line(r))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(rep.Targets) > 0 {
		fmt.Fprintf(&b, "\nTargets\n")
		for _, t := range rep.Targets {
			mark := "met   "
			if !t.Met {
				mark = "MISSED"
			}
			fmt.Fprintf(&b, "  %s  %s: want %s; got %s\n", mark, t.Name, t.Want, t.Got)
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "\nnote: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// micros is d in microseconds, fractions kept.
func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func header(layer, load string) string {
	switch load {
	case Memory:
		return "setup\tN\tlocks\tMiB/node\t"
	case Idle:
		return "setup\tN\tper member/s\tbusiest/s\t"
	case Failover:
		return "setup\tN\tnext grant ms\t"
	}
	cols := []string{"setup\t", "N\t", "entries\t", "msgs/entry\t", "paper\t", "membership\t", "total\t", "bytes/entry\t"}
	switch {
	case layer == LayerSim && load == Light:
		cols = append(cols, "wait p50\t", "wait p99\t")
	case layer == LayerSim:
		cols = append(cols, "wait p50\t", "wait p99\t", "entries/T\t", "sync delay\t", "paper\t")
	case load == Light:
		cols = append(cols, "acquire p50 µs\t", "p99 µs\t", "acq+rel p50 µs\t", "÷ RTT\t")
	default:
		cols = append(cols, "acquire p50 µs\t", "p99 µs\t", "entries/s\t", "sync µs\t", "sync\t", "recv/node\t", "cpu µs/node\t")
	}
	return strings.Join(cols, "")
}

func line(r Row) string {
	if r.Err != "" {
		return fmt.Sprintf("%s\t%d\t\terror: %s\t", r.Setup(), r.N, r.Err)
	}
	switch r.Load {
	case Memory:
		return fmt.Sprintf("%s\t%d\t%d\t%.2f\t", r.Setup(), r.N, r.Locks, r.MemPerNodeM)
	case Idle:
		return fmt.Sprintf("%s\t%d\t%.1f\t%.1f\t", r.Setup(), r.N, r.IdlePerMember, r.IdleBusiest)
	case Failover:
		return fmt.Sprintf("%s\t%d\t%.0f\t", r.Setup(), r.N, r.FailoverMS)
	}
	paper, paperDelay := "", ""
	if r.Paper != nil {
		paper = fmt.Sprintf("%.2f", r.Paper.MessagesValue)
		if r.Paper.MessagesMax > 0 {
			paper = fmt.Sprintf("%.2f-%.2f", r.Paper.MessagesValue, r.Paper.MessagesMax)
		}
		if r.Paper.SyncDelayT > 0 {
			paperDelay = r.Paper.SyncDelay
			if i := strings.Index(paperDelay, " ("); i > 0 {
				paperDelay = paperDelay[:i]
			}
		}
	}
	s := fmt.Sprintf("%s\t%d\t%d\t%.2f\t%s\t%.2f\t%.2f\t%.0f\t", r.Setup(), r.N, r.Entries, r.Messages, paper, r.Membership, r.Total, r.Bytes)
	switch {
	case r.Layer == LayerSim && r.Load == Light:
		s += fmt.Sprintf("%.0fT\t%.0fT\t", r.LatencyP50T, r.LatencyP99T)
	case r.Layer == LayerSim:
		s += fmt.Sprintf("%.0fT\t%.0fT\t%.3f\t%.2fT\t%s\t", r.LatencyP50T, r.LatencyP99T, r.PerT, r.SyncDelayT, paperDelay)
	case r.Load == Light:
		s += fmt.Sprintf("%.0f\t%.0f\t%.0f\t%.2f\t", r.LatencyP50US, r.LatencyP99US, r.CycleP50US, r.CycleP50US/r.RTTUS)
	default:
		s += fmt.Sprintf("%.0f\t%.0f\t%.0f\t%.0f\t%.2fT\t%.2f\t%.1f\t", r.LatencyP50US, r.LatencyP99US, r.PerSecond, r.SyncDelayUS, r.SyncDelayT, r.RecvPerNode, r.CPUPerNodeUS)
	}
	return s
}
