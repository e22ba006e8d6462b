package boottime

import (
	"time"

	"golang.org/x/sys/unix"
)

func now() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// CLOCK_BOOTTIME exists since Linux 2.6.39; without it, the
		// monotonic clock is the best there is.
		return time.Since(processStart)
	}
	return time.Duration(ts.Nano())
}

func hostWide() bool {
	var ts unix.Timespec
	return unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) == nil
}
