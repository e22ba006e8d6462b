package main

import (
	"strings"
	"testing"
)

// A key change that would cut a member off is refused, naming the member.
func TestKeysAllowed(t *testing.T) {
	held := memberKeys{Node: 2, Addr: "10.0.0.2:7946", Answered: true, Keys: []string{"aaaaaaaa", "bbbbbbbb"}}
	cases := []struct {
		op, id string
		m      memberKeys
		want   string // "" allowed
	}{
		{"key-use", "bbbbbbbb", held, ""},
		{"key-use", "cccccccc", held, "node 2 (10.0.0.2:7946) lacks key cccccccc"},
		{"key-remove", "bbbbbbbb", held, ""},
		{"key-remove", "aaaaaaaa", held, "still seals with key aaaaaaaa"},
		{"key-use", "bbbbbbbb", memberKeys{Node: 3, Addr: "10.0.0.3:7946"}, "node 3 (10.0.0.3:7946) did not answer"},
		{"key-remove", "bbbbbbbb", memberKeys{Node: 3, Answered: true, Error: "no keys"}, "cannot list its keys"},
	}
	for _, c := range cases {
		err := keysAllowed([]memberKeys{held, c.m}, request{Op: c.op, ID: c.id})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %s: %v, want allowed", c.op, c.id, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %s with %+v: %v, want %q", c.op, c.id, c.m, err, c.want)
		}
	}
}
