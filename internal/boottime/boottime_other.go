//go:build !linux

package boottime

import "time"

// Elsewhere the monotonic clock is what there is; on the BSDs and macOS it
// counts suspend already.
func now() time.Duration { return time.Since(processStart) }

func hostWide() bool { return false }
