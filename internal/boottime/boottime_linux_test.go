package boottime

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The extrapolated clock never runs ahead of CLOCK_BOOTTIME read right
// after it (a lease counted on it never ends early), nor falls behind it by
// more than a little, and it never goes back.
func TestExtrapolationTracksTheKernelClock(t *testing.T) {
	prev := Now()
	for i := 0; i < 2000; i++ {
		got := Now()
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
			t.Skip("no CLOCK_BOOTTIME:", err)
		}
		kernel := time.Duration(ts.Nano())
		if got > kernel {
			t.Fatalf("Now %v runs ahead of CLOCK_BOOTTIME %v", got, kernel)
		}
		if kernel-got > 50*time.Millisecond {
			t.Fatalf("Now %v lags CLOCK_BOOTTIME %v by %v", got, kernel, kernel-got)
		}
		if got < prev {
			t.Fatalf("Now went back from %v to %v", prev, got)
		}
		prev = got
		if i%100 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
}

func BenchmarkNow(b *testing.B) {
	for i := 0; i < b.N; i++ {
		_ = Now()
	}
}
