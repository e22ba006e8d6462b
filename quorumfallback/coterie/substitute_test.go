package coterie

import (
	"math/rand"
	"slices"
	"testing"
)

// With every node up, a substitute is the node's own set; with nodes down
// it avoids them; and any two substitutes meet, whoever computed them with
// whatever view of who is down (two nodes may disagree for a while).
func TestSubstitutesMeet(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, kind := range []string{"tree", "majority"} {
		for n := 1; n <= 15; n++ {
			c, err := New(kind, n)
			if err != nil {
				t.Fatal(err)
			}
			for self := range n {
				got, ok := c.Substitute(self)(func(int) bool { return true })
				if !ok || !slices.Equal(got, c.Sets[self]) {
					t.Fatalf("%s N=%d node %d, all up: %v %v, want its set %v", kind, n, self, got, ok, c.Sets[self])
				}
			}
			var found [][]int
			for range 300 {
				down := make([]bool, n)
				for j := range down {
					down[j] = rng.Intn(4) == 0
				}
				self := rng.Intn(n)
				q, ok := c.Substitute(self)(func(j int) bool { return !down[j] })
				if !ok {
					continue
				}
				for _, j := range q {
					if down[j] {
						t.Fatalf("%s N=%d: substitute %v holds down node %d", kind, n, q, j)
					}
				}
				found = append(found, q)
			}
			for _, a := range found {
				for _, b := range found {
					if !meet(a, b) {
						t.Fatalf("%s N=%d: substitutes %v and %v do not meet", kind, n, a, b)
					}
				}
			}
		}
	}
	for _, kind := range []string{"fpp", "grid", "all"} {
		c, err := New(kind, 7)
		if err != nil {
			t.Fatal(err)
		}
		if c.Substitute(0) != nil {
			t.Errorf("%s has a substitute", kind)
		}
	}
}
