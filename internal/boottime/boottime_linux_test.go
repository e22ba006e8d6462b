package boottime

import (
	"sync"
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

// Read from many goroutines at once on a loaded machine (a goroutine may be
// descheduled in the middle of a reading), Now still never runs ahead of the
// kernel clock, and lags a kernel reading taken just before it by less than
// the gap a kept reading may have, plus scheduling noise.
func TestConcurrentReadersNeverRunAhead(t *testing.T) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var worst time.Duration
	ahead := 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				before := kernelNow(t)
				got := Now()
				after := kernelNow(t)
				mu.Lock()
				if got > after {
					ahead++
				}
				worst = max(worst, before-got)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ahead > 0 {
		t.Fatalf("Now ran ahead of CLOCK_BOOTTIME %d times", ahead)
	}
	// A reading kept for extrapolation lags by less than maxGap, and a
	// suspend of more than maxSkew forces a fresh one; being descheduled
	// between the kernel reading and Now only makes Now larger.
	if worst >= maxGap+maxSkew {
		t.Fatalf("Now lagged a kernel reading taken before it by %v", worst)
	}
	t.Logf("worst lag behind a kernel reading taken before Now: %v", worst)
}

func kernelNow(t *testing.T) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Skip("no CLOCK_BOOTTIME:", err)
	}
	return time.Duration(ts.Nano())
}
