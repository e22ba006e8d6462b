// Package boottime reads the clock that leases are counted on: one that runs
// at the rate of real time and keeps running while the system is suspended.
//
// Go's monotonic clock is CLOCK_MONOTONIC on Linux, which stops during
// suspend: a process that counted a lease on it would, after a resume, still
// believe in a lease the group had long given up on. CLOCK_BOOTTIME counts
// the suspend too. Both are per host, so a value read by one process on a
// host can be compared with one read by another process on the same host
// (the daemon and `mcnode lock` do), never with another host's.
package boottime

import "time"

// Now returns the time since boot, suspend included.
func Now() time.Duration { return now() }

// HostWide reports whether Now reads a clock of the host, which every
// process reads alike, rather than the fallback: the monotonic clock since
// this process started, which another process cannot compare with its own.
func HostWide() bool { return hostWide() }
