package fanout

import "testing"

func TestHub(t *testing.T) {
	var h Hub[int]
	score, id := h.Add("score")
	all, _ := h.Add("")
	if d := h.Deliver("chat", 1); d != 0 {
		t.Errorf("dropped %d", d)
	}
	h.Deliver("score", 2)
	if got := <-all; got != 1 {
		t.Errorf("all topics: %d, want 1", got)
	}
	if got := <-all; got != 2 {
		t.Errorf("all topics: %d, want 2", got)
	}
	if got := <-score; got != 2 {
		t.Errorf("score: %d, want 2 (and no chat)", got)
	}
	for range Capacity {
		h.Deliver("score", 3)
	}
	if d := h.Deliver("score", 4); d != 2 {
		t.Errorf("both full: %d dropped, want 2", d)
	}
	h.Remove(id)
	h.Remove(id)
	if _, ok := <-score; !ok {
		t.Error("the buffered updates are lost on Remove")
	}
	h.CloseAll()
	n := 0
	for range all {
		n++
	}
	if n != Capacity {
		t.Errorf("%d updates drained after CloseAll, want %d", n, Capacity)
	}
}
