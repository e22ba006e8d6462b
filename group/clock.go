package group

import (
	"time"

	"github.com/mcnode/mcnode/internal/boottime"
)

// Clock is where the runtime gets its ticks. Tests inject their own, or run
// SystemClock inside a testing/synctest bubble.
type Clock interface {
	// Now returns the time ticks and leases are counted on. Only
	// differences between its values matter: it need not be the time of
	// day, but it must run at the rate of real time and, on a machine that
	// may be suspended, keep running through the suspend, or a lease would
	// outlive its real length.
	Now() time.Time
	NewTicker(d time.Duration) Ticker
}

// Ticker delivers ticks on C until stopped.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// BootClock is the clock a node uses unless told otherwise: CLOCK_BOOTTIME
// on Linux, which keeps counting through a suspend of the machine, where
// Go's monotonic clock (CLOCK_MONOTONIC) stops. Its Now is the time since
// boot, as a time.Time from the Unix epoch: not the time of day. Being the
// host's, it compares across the processes of one host: `mcnode lock`
// checks a daemon's lease deadline against it.
type BootClock struct{}

// Now returns the time since boot, suspend included.
func (BootClock) Now() time.Time { return time.Unix(0, int64(boottime.Now())) }

// NewTicker returns a time.Ticker. A ticker only wakes the runtime, which
// counts ticks from Now, so ticks that a stall or a suspend swallowed are
// caught up.
func (BootClock) NewTicker(d time.Duration) Ticker { return systemTicker{time.NewTicker(d)} }

// SystemClock is Go's clock: time.Now and its monotonic reading, which a
// suspend of the machine stops. Inside a testing/synctest bubble it is the
// bubble's fake time, which is what runtime tests use.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTicker returns a time.Ticker.
func (SystemClock) NewTicker(d time.Duration) Ticker { return systemTicker{time.NewTicker(d)} }

type systemTicker struct{ t *time.Ticker }

func (s systemTicker) C() <-chan time.Time { return s.t.C }
func (s systemTicker) Stop()               { s.t.Stop() }
