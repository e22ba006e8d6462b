package boottime

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Reading CLOCK_BOOTTIME is a system call (about 1.5 µs; Go reads only the
// realtime and monotonic clocks through the vDSO, at about 50 ns), and the
// runtime reads the clock at every datagram. So Now reads it at most once
// per refreshEvery of monotonic time and extrapolates with the monotonic
// clock in between. The two clocks differ only by the time spent suspended,
// and a suspend shows in between: the wall clock runs on through it while
// the monotonic clock stops, so a wall clock that moved away from the
// monotonic one since the last reading (a suspend, or a clock step) forces a
// fresh reading. A reading is kept for extrapolation only if the system call
// took under maxGap: the goroutine may have been descheduled in between, and
// the extrapolation would then fall behind by as long. It never runs ahead
// of the kernel clock (the monotonic reading is taken after the system
// call), and falls behind it by less than maxGap plus maxSkew (a suspend too
// short to notice).
const (
	refreshEvery = 10 * time.Millisecond
	maxSkew      = time.Millisecond
	maxGap       = 20 * time.Microsecond
)

type reading struct {
	at   time.Time // wall and monotonic, from time.Now
	boot time.Duration
}

var last atomic.Pointer[reading]

func now() time.Duration {
	t := time.Now()
	if r := last.Load(); r != nil {
		mono := t.Sub(r.at)                                   // monotonic
		wall := time.Duration(t.UnixNano() - r.at.UnixNano()) // wall
		if mono >= 0 && mono < refreshEvery && wall-mono < maxSkew && mono-wall < maxSkew {
			return r.boot + mono
		}
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// CLOCK_BOOTTIME exists since Linux 2.6.39; without it, the
		// monotonic clock is the best there is.
		return time.Since(processStart)
	}
	boot := time.Duration(ts.Nano())
	// The wall clock's gap, too: a suspend during the call leaves the
	// monotonic gap tiny.
	if at := time.Now(); at.Sub(t) < maxGap && at.UnixNano()-t.UnixNano() < int64(maxGap) {
		last.Store(&reading{at: at, boot: boot})
	}
	return boot
}

func hostWide() bool {
	var ts unix.Timespec
	return unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) == nil
}
