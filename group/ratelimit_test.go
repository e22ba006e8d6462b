package group

import (
	"fmt"
	"testing"
	"time"
)

func TestLimiterBucket(t *testing.T) {
	l := newLimiter(1000) // burst 1000
	now := time.Unix(0, 0)
	burst := func() (passed int) { // 5,000 datagrams from a:1 at once
		for range 5000 {
			if l.allow("a:1", now) {
				passed++
			}
		}
		return passed
	}
	if passed := burst(); passed != 1000 {
		t.Errorf("a burst of 5,000 at once: %d passed, want the burst of 1,000", passed)
	}
	if !l.allow("b:1", now) {
		t.Error("another source is limited by the first one's flood")
	}
	now = now.Add(50 * time.Millisecond) // 50 tokens back
	if passed := burst(); passed != 50 {
		t.Errorf("after 50 ms at 1000/s: %d passed, want 50", passed)
	}
	now = now.Add(time.Hour)
	if passed := burst(); passed != 1000 {
		t.Errorf("after an hour idle: %d passed, want no more than the burst of 1,000", passed)
	}
}

// A flood from ever new addresses keeps the limiter's memory bounded and
// evicts the least recently seen.
func TestLimiterBounded(t *testing.T) {
	l := newLimiter(1000)
	now := time.Unix(0, 0)
	l.allow("member:1", now)
	for i := range 3 * maxSources {
		l.allow(fmt.Sprintf("10.0.0.1:%d", i), now)
		if i%100 == 0 {
			l.allow("member:1", now) // a member that keeps talking stays
		}
	}
	if len(l.buckets) != maxSources || l.order.Len() != maxSources {
		t.Errorf("%d buckets, %d in order, want %d", len(l.buckets), l.order.Len(), maxSources)
	}
	if _, ok := l.buckets["member:1"]; !ok {
		t.Error("a source seen recently was evicted")
	}
	if _, ok := l.buckets["10.0.0.1:0"]; ok {
		t.Error("the least recently seen source was kept")
	}
}
