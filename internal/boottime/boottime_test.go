package boottime

import (
	"testing"
	"time"
)

// The clock moves forward at the rate of real time: over a measured sleep it
// advances at least as much as the monotonic clock does, and not wildly
// more (nothing suspends a test).
func TestRunsAtRealRate(t *testing.T) {
	a, start := Now(), time.Now()
	time.Sleep(20 * time.Millisecond)
	b, took := Now(), time.Since(start)
	if d := b - a; d < took-time.Millisecond || d > took+time.Second {
		t.Fatalf("boot clock advanced %v over %v of monotonic time", d, took)
	}
	if a <= 0 {
		t.Fatalf("boot clock reads %v", a)
	}
}
