package coterie

import (
	"fmt"
	"sort"
	"strings"
)

// Coterie gives every node 0..N-1 its quorum.
type Coterie struct {
	Kind string  // "fpp", "grid", "tree", "majority" or "all"
	N    int     // number of nodes
	Sets [][]int // Sets[i] is node i's quorum: sorted ascending, no duplicates, contains i
}

// builders maps each kind to its constructor; kinds keeps their order for
// Kinds and for error messages, which a map would not.
var (
	kinds    = []string{"fpp", "grid", "tree", "majority", "all"}
	builders = map[string]func(int) (Coterie, error){
		"fpp":      FPP,
		"grid":     Grid,
		"tree":     Tree,
		"majority": Majority,
		"all":      All,
	}
)

// Kinds returns the names New accepts, in a fixed order.
func Kinds() []string { return append([]string(nil), kinds...) }

// New builds the coterie of the named kind for n nodes.
func New(kind string, n int) (Coterie, error) {
	b, ok := builders[kind]
	if !ok {
		return Coterie{}, fmt.Errorf("coterie: unknown kind %q (want one of %s)", kind, strings.Join(kinds, ", "))
	}
	return b(n)
}

// checkN rejects node counts no coterie exists for.
func checkN(kind string, n int) error {
	if n < 1 {
		return fmt.Errorf("coterie: %s needs at least 1 node, got n=%d", kind, n)
	}
	return nil
}

// String summarises the coterie as "kind N=n K=k", giving K as a range
// and a mean when the quorum sizes differ.
func (c Coterie) String() string {
	if len(c.Sets) == 0 {
		return fmt.Sprintf("%s N=%d (no sets)", c.Kind, c.N)
	}
	lo, hi, mean := c.Sizes()
	if lo == hi {
		return fmt.Sprintf("%s N=%d K=%d", c.Kind, c.N, lo)
	}
	return fmt.Sprintf("%s N=%d K=%d..%d (mean %.2f)", c.Kind, c.N, lo, hi, mean)
}

// Check verifies the coterie by brute force: N >= 1, one set per node,
// each set sorted without duplicates, ids in 0..N-1, i in Sets[i], and
// every pair of sets intersecting. It is O(N²·K), which is what makes it
// trustworthy rather than fast; constructions are built once.
func (c Coterie) Check() error {
	if c.N < 1 {
		return fmt.Errorf("coterie: N=%d, want at least 1", c.N)
	}
	if len(c.Sets) != c.N {
		return fmt.Errorf("coterie: %d sets for N=%d nodes", len(c.Sets), c.N)
	}
	for i, s := range c.Sets {
		has := false
		for k, x := range s {
			if x < 0 || x >= c.N {
				return fmt.Errorf("coterie: set %d holds node %d, outside 0..%d", i, x, c.N-1)
			}
			if k > 0 && x <= s[k-1] {
				return fmt.Errorf("coterie: set %d is not strictly ascending at %d after %d", i, x, s[k-1])
			}
			has = has || x == i
		}
		if !has {
			return fmt.Errorf("coterie: set %d %v does not contain node %d", i, s, i)
		}
	}
	for i := range c.Sets {
		for j := i + 1; j < c.N; j++ {
			if !meet(c.Sets[i], c.Sets[j]) {
				return fmt.Errorf("coterie: sets %d %v and %d %v do not intersect", i, c.Sets[i], j, c.Sets[j])
			}
		}
	}
	return nil
}

// meet reports whether two ascending slices share an element.
func meet(a, b []int) bool {
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			return true
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return false
}

// Sizes returns the smallest, largest and mean quorum size K: the number
// of REQUEST messages (plus one, for the node itself) a node sends.
func (c Coterie) Sizes() (min, max int, mean float64) {
	if len(c.Sets) == 0 {
		return 0, 0, 0
	}
	min, max = len(c.Sets[0]), len(c.Sets[0])
	total := 0
	for _, s := range c.Sets {
		if len(s) < min {
			min = len(s)
		}
		if len(s) > max {
			max = len(s)
		}
		total += len(s)
	}
	return min, max, float64(total) / float64(len(c.Sets))
}

// Load returns, for every node j, how many sets contain j: how many
// requesters j arbitrates for (Maekawa's D). Ids outside 0..N-1 are
// ignored so that Load is safe on a coterie that fails Check.
func (c Coterie) Load() []int {
	if c.N < 1 {
		return nil
	}
	load := make([]int, c.N)
	for _, s := range c.Sets {
		for _, x := range s {
			if x >= 0 && x < c.N {
				load[x]++
			}
		}
	}
	return load
}

// Substitute returns how node self finds a quorum of live nodes when a
// member of its own set is down, for the coteries that have one: the tree
// (TreeQuorum, Agrawal and El Abbadi) and the majority (the first n/2+1
// live nodes from self on, any two of which meet). It returns nil for the
// others: a finite projective plane, a grid or "all" has no set to put in
// place of a failed member's, so a node whose set holds one waits.
func (c Coterie) Substitute(self int) func(alive func(int) bool) ([]int, bool) {
	n := c.N
	switch c.Kind {
	case "tree":
		return func(alive func(int) bool) ([]int, bool) { return TreeQuorum(n, self, alive) }
	case "majority":
		return func(alive func(int) bool) ([]int, bool) {
			k := n/2 + 1
			out := make([]int, 0, k)
			for d := 0; d < n && len(out) < k; d++ {
				if j := (self + d) % n; alive(j) {
					out = append(out, j)
				}
			}
			if len(out) < k {
				return nil, false
			}
			sort.Ints(out)
			return out, true
		}
	}
	return nil
}
