package bench

import (
	"fmt"
	"strings"
)

// Target is one of the project's performance targets, judged from a run's
// rows. A target with no rows to judge is left out.
type Target struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Met  bool   `json:"met"`
}

// Targets judges the rows against the project's targets, as
// docs/BENCHMARKS.md lists them.
func Targets(rows []Row) []Target {
	var out []Target
	ok := func(r Row) bool { return r.Err == "" && (r.Entries > 0 || r.Load == Idle) }
	pick := func(f func(Row) bool) []Row {
		var rs []Row
		for _, r := range rows {
			if ok(r) && f(r) {
				rs = append(rs, r)
			}
		}
		return rs
	}
	span := func(rs []Row) string {
		lo, hi := rs[0].N, rs[0].N
		for _, r := range rs {
			lo, hi = min(lo, r.N), max(hi, r.N)
		}
		return fmt.Sprintf("N=%d..%d", lo, hi)
	}
	worst := func(rs []Row, v func(Row) float64) (Row, float64) {
		w := rs[0]
		for _, r := range rs {
			if v(r) > v(w) {
				w = r
			}
		}
		return w, v(w)
	}
	// The targets are the unkeyed arbiter's; the keyed one is compared
	// with it below.
	multicastHeavy := func(layer string) func(Row) bool {
		return func(r Row) bool { return r.Protocol == RotatingArbiter && r.Load == Heavy && r.Layer == layer }
	}
	for _, layer := range []string{LayerSim, LayerSockets} {
		if rs := pick(multicastHeavy(layer)); len(rs) > 0 {
			w, v := worst(rs, func(r Row) float64 { return r.Messages })
			out = append(out, Target{
				Name: fmt.Sprintf("multicast datagrams per entry, heavy load, %s, %s", layer, span(rs)),
				Want: "at most 3 (membership apart)",
				Got:  fmt.Sprintf("at most %.3f (N=%d), membership %.2f of which backup acks %.2f", v, w.N, w.Membership, w.Acks),
				Met:  v <= 3,
			})
			w, v = worst(rs, func(r Row) float64 { return r.SyncDelayT })
			out = append(out, Target{
				Name: fmt.Sprintf("multicast synchronization delay, heavy load, %s, %s", layer, span(rs)),
				Want: "at most 2T (aim: T)",
				Got:  fmt.Sprintf("at most %.2fT (N=%d)", v, w.N),
				Met:  v <= 2.05,
			})
		}
	}
	if rs := pick(func(r Row) bool { return r.Protocol == RotatingArbiter && r.Load == Light && r.Layer == LayerSim }); len(rs) > 0 {
		w, v := worst(rs, func(r Row) float64 { return r.Messages })
		out = append(out, Target{
			Name: "multicast datagrams per entry, light load, sim, " + span(rs),
			Want: "at most 3 (membership apart)",
			Got:  fmt.Sprintf("at most %.3f (N=%d)", v, w.N),
			Met:  v <= 3.001,
		})
	}
	if rs := pick(multicastHeavy(LayerSim)); len(rs) > 0 {
		w, v := worst(rs, func(r Row) float64 { return r.Messages + r.Membership })
		out = append(out, Target{
			Name: "multicast datagrams per entry, membership included, heavy load, sim, " + span(rs),
			Want: "at most 3.3",
			Got:  fmt.Sprintf("at most %.2f (N=%d)", v, w.N),
			Met:  v <= 3.3,
		})
	}
	if rs := pick(func(r Row) bool {
		return r.Protocol == RotatingArbiter && r.Load == Light && r.Layer == LayerSockets && r.RTTUS > 0
	}); len(rs) > 0 {
		w, v := worst(rs, func(r Row) float64 { return r.CycleP50US / r.RTTUS })
		out = append(out, Target{
			Name: "uncontended acquire plus release, sockets, " + span(rs),
			Want: "within 3 raw UDP round trips",
			Got:  fmt.Sprintf("%.2f round trips (%.0f µs against %.0f µs, N=%d)", v, w.CycleP50US, w.RTTUS, w.N),
			Met:  v <= 3,
		})
	}
	if rs := pick(func(r Row) bool { return multicastHeavy(LayerSockets)(r) && r.N == 8 }); len(rs) > 0 {
		out = append(out, Target{
			Name: "one contended resource, 8 nodes, sockets",
			Want: "at least 10000 entries/s",
			Got:  fmt.Sprintf("%.0f entries/s", rs[0].PerSecond),
			Met:  rs[0].PerSecond >= 10000,
		})
	}
	if rs := pick(func(r Row) bool { return r.Load == Idle && r.Protocol == RotatingArbiter }); len(rs) > 1 {
		lo, hi := rs[0], rs[0]
		for _, r := range rs {
			if r.N < lo.N {
				lo = r
			}
			if r.N > hi.N {
				hi = r
			}
		}
		out = append(out, Target{
			Name: "membership datagrams per member per second, idle group, sockets, " + span(rs),
			Want: "flat in N (within 25%)",
			Got:  fmt.Sprintf("%.1f at N=%d, %.1f at N=%d", lo.IdlePerMember, lo.N, hi.IdlePerMember, hi.N),
			Met:  hi.IdlePerMember <= 1.25*lo.IdlePerMember,
		})
	}
	if rs := pick(func(r Row) bool { return r.Load == Memory && r.Protocol == RotatingArbiter }); len(rs) > 0 {
		w, v := worst(rs, func(r Row) float64 { return r.MemPerNodeM })
		out = append(out, Target{
			Name: fmt.Sprintf("memory per node, %d nodes holding %d locks", w.N, w.Locks),
			Want: "at most 10 MiB",
			Got:  fmt.Sprintf("%.2f MiB", v),
			Met:  v <= 10,
		})
	}
	if t, ok := keyCost(pick); ok {
		out = append(out, t)
	}
	if rs := pick(func(r Row) bool { return r.Mode == ModeQuorum && r.Layer == LayerSim && r.Paper != nil }); len(rs) > 0 {
		var gaps []string
		for _, r := range rs {
			if g := paperGap(r); g != "" {
				gaps = append(gaps, g)
			}
		}
		got := fmt.Sprintf("all %d simulated rows", len(rs))
		if len(gaps) > 0 {
			got = fmt.Sprintf("%d of %d rows outside: %s", len(gaps), len(rs), strings.Join(gaps, "; "))
		}
		out = append(out, Target{
			Name: "quorum protocols against their papers, simulation",
			Want: "messages per entry and synchronization delay within the papers' figures",
			Got:  got,
			Met:  len(gaps) == 0,
		})
	}
	return out
}

// paperGap says how a simulated quorum row misses its paper's figures, or
// "" if it does not. Light load must equal the formula (it is exact);
// heavy load must not exceed it, nor the synchronization delay.
func paperGap(r Row) string {
	p := r.Paper
	limit := p.MessagesValue
	if p.MessagesMax > 0 {
		limit = p.MessagesMax
	}
	const slack = 1e-6
	switch {
	case r.Load == Light && (r.Messages > p.MessagesValue*1.001+slack || r.Messages < p.MessagesValue*0.999-slack):
		return fmt.Sprintf("%s N=%d light: %.2f messages, paper %.2f", r.Setup(), r.N, r.Messages, p.MessagesValue)
	case r.Load == Heavy && r.Messages > limit*1.001+slack:
		return fmt.Sprintf("%s N=%d heavy: %.2f messages, paper at most %.2f", r.Setup(), r.N, r.Messages, limit)
	case r.Load == Heavy && p.SyncDelayT > 0 && r.SyncDelayT > p.SyncDelayT+slack:
		return fmt.Sprintf("%s N=%d: delay %.2fT, paper %s", r.Setup(), r.N, r.SyncDelayT, p.SyncDelay)
	}
	return ""
}

// keyCost compares the keyed arbiter's socket rows with the unkeyed ones of
// the same run, N and load: the acquire latency as a ratio, and the bytes
// per entry sealing adds. The worst pair is reported.
func keyCost(pick func(func(Row) bool) []Row) (Target, bool) {
	plain := map[[2]any]Row{}
	for _, r := range pick(func(r Row) bool { return r.Protocol == RotatingArbiter && r.Layer == LayerSockets }) {
		plain[[2]any{r.N, r.Load}] = r
	}
	var worst, base Row
	ratio := 0.0
	for _, k := range pick(func(r Row) bool { return r.Protocol == RotatingArbiterKeyed && r.Layer == LayerSockets }) {
		p, ok := plain[[2]any{k.N, k.Load}]
		if !ok || p.LatencyP50US <= 0 {
			continue
		}
		if x := k.LatencyP50US / p.LatencyP50US; x > ratio {
			ratio, worst, base = x, k, p
		}
	}
	if ratio == 0 {
		return Target{}, false
	}
	return Target{
		Name: "cost of the group key, sockets (keyed against unkeyed, same run)",
		Want: "acquire latency p50 at most 1.5x",
		Got: fmt.Sprintf("at most %.2fx (%.0f µs against %.0f µs, N=%d %s load); bytes per entry %.0f against %.0f",
			ratio, worst.LatencyP50US, base.LatencyP50US, worst.N, worst.Load, worst.Bytes, base.Bytes),
		Met: ratio <= 1.5,
	}, true
}
