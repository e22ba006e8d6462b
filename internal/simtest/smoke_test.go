package simtest

import (
	"testing"
)

func TestSmoke(t *testing.T) {
	s := New(Options{Seed: 1, Hosts: 3, Trace: func(l string) { t.Log(l) }})
	w := NewWorkload(s, 2)
	w.Run(200)
	for _, h := range s.Hosts {
		t.Logf("h%d id=%d joined=%v T=%d digest=%x server=%v held=%v stats=%+v", h.Index, h.Node.ID(), h.Node.Joined(), h.Node.T(), h.Node.Digest(), h.Node.IsServer(), h.Node.Held(), h.Node.Stats())
	}
	t.Logf("entries=%d datagrams=%v", s.Stats.Entries, s.Stats.Datagrams)
	for _, v := range s.Check.Violations {
		t.Error(v)
	}
	if s.Stats.Entries == 0 {
		t.Fatal("no entries")
	}
}
