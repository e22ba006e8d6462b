package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mcnode/mcnode/group"
)

// `mcnode status` shows every drop by reason, and their sum.
func TestStatusShowsDropsByReason(t *testing.T) {
	st := group.Status{Group: "g", Stats: group.Stats{Received: 40,
		Drops: map[string]uint64{group.DropForged: 3, group.DropMalformed: 2, group.DropOversized: 1}}}
	v := viewStatus(st)
	if v.Dropped != 6 {
		t.Errorf("dropped %d, want 6", v.Dropped)
	}
	var out bytes.Buffer
	printStatus(&out, v)
	want := "datagrams: 40 received, 6 dropped (forged 3, malformed 2, oversized 1)"
	if !strings.Contains(out.String(), want) {
		t.Errorf("status output lacks %q:\n%s", want, out.String())
	}
}
