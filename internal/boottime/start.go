package boottime

import "time"

// processStart anchors the fallbacks to the monotonic clock.
var processStart = time.Now()
