package bench

import (
	"fmt"
	"runtime"
)

// Job is one run of the bench: one layer, load, setup and N.
type Job struct {
	Layer, Load string
	Setup       Setup
	N           int
	run         func() Row
}

// String names the job for progress displays.
func (j Job) String() string {
	return fmt.Sprintf("%-7s %-5s %-24s N=%d", j.Layer, j.Load, j.Setup, j.N)
}

// Run runs the job and returns its row, with the paper's figures for it.
func (j Job) Run() Row {
	row := j.run()
	if p, err := paperFigures(j.Setup, j.N, j.Load, row.entriesBy); err == nil {
		row.Paper = p
	}
	// A run leaves garbage behind (a whole simulated group); collect it
	// now rather than during the next run's measure.
	runtime.GC()
	return row
}

// SimJobs plans the simulation layer: every setup at every N and load.
func SimJobs(setups []Setup, ns []int, loads []string, opt SimOptions) []Job {
	var jobs []Job
	for _, load := range loads {
		if load == Memory || load == Idle || load == Failover {
			continue // socket-layer rows
		}
		for _, st := range setups {
			if st.Keyed() {
				continue // the simulation does not seal: the same as unkeyed
			}
			for _, n := range ns {
				j := Job{Layer: LayerSim, Load: load, Setup: st, N: n}
				if st.Multicast() {
					j.run = func() Row { return simMulticast(n, load, opt) }
				} else {
					j.run = func() Row { return simQuorum(st, n, load, opt) }
				}
				jobs = append(jobs, j)
			}
		}
	}
	return jobs
}
