package arbiter_test

import (
	"testing"

	"github.com/mcnode/mcnode/arbiter"
)

// The quorum as status lines say it, with the noun agreeing with the count
// (a group of one said "quorum held (1 members)").
func TestQuorumString(t *testing.T) {
	for _, tc := range []struct {
		q    arbiter.Quorum
		want string
	}{
		{arbiter.Quorum{Held: true, Members: 1}, "quorum held (1 member)"},
		{arbiter.Quorum{Held: true, Members: 5}, "quorum held (5 members)"},
		{arbiter.Quorum{Reachable: 2, Members: 5}, "no quorum: 2 of 5 members reachable"},
		{arbiter.Quorum{Held: true, Members: 3, Observers: 4}, "quorum held (3 voting members, and 4 observers)"},
		{arbiter.Quorum{Reachable: 1, Members: 3, Observers: 1}, "no quorum: 1 of 3 voting members reachable, and 1 observer"},
		{arbiter.Quorum{Reachable: 1, Members: 1}, "no quorum: 1 of 1 member reachable"},
		{arbiter.Quorum{Members: 1}, "no quorum: no server heard (1 member)"},
		{arbiter.Quorum{Members: 3}, "no quorum: no server heard (3 members)"},
	} {
		if got := tc.q.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.q, got, tc.want)
		}
	}
}
