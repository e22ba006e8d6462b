package coterie

import (
	"fmt"
	"math/bits"
	"reflect"
	"strings"
	"testing"
)

// bruteFirstBad checks a coterie without using Check: per-set properties
// with maps, then every pair by membership. It returns "" if the coterie
// is sound, else a description; for a failed intersection it returns the
// lexicographically first pair as "i,j".
func bruteFirstBad(c Coterie) string {
	if c.N < 1 || len(c.Sets) != c.N {
		return "shape"
	}
	member := make([]map[int]bool, c.N)
	for i, s := range c.Sets {
		member[i] = map[int]bool{}
		for k, x := range s {
			if x < 0 || x >= c.N || member[i][x] || (k > 0 && s[k-1] > x) {
				return "set"
			}
			member[i][x] = true
		}
		if !member[i][i] {
			return "self"
		}
	}
	for i := 0; i < c.N; i++ {
		for j := i + 1; j < c.N; j++ {
			common := false
			for x := range member[i] {
				if member[j][x] {
					common = true
				}
			}
			if !common {
				return fmt.Sprintf("%d,%d", i, j)
			}
		}
	}
	return ""
}

func mustNew(t *testing.T, kind string, n int) Coterie {
	t.Helper()
	c, err := New(kind, n)
	if err != nil {
		t.Fatalf("New(%q, %d): %v", kind, n, err)
	}
	if c.Kind != kind || c.N != n || len(c.Sets) != n {
		t.Fatalf("New(%q, %d) = kind %q N=%d with %d sets", kind, n, c.Kind, c.N, len(c.Sets))
	}
	return c
}

func clone(c Coterie) Coterie {
	d := c
	d.Sets = make([][]int, len(c.Sets))
	for i, s := range c.Sets {
		d.Sets[i] = append([]int(nil), s...)
	}
	return d
}

func without(s, drop []int, keep int) []int {
	var out []int
	for _, x := range s {
		if x == keep || !contains(drop, x) {
			out = append(out, x)
		}
	}
	return out
}

func TestEveryKindEveryN(t *testing.T) {
	for _, kind := range Kinds() {
		for n := 1; n <= 64; n++ {
			c := mustNew(t, kind, n)
			if err := c.Check(); err != nil {
				t.Errorf("%s n=%d: %v", kind, n, err)
			}
			if bad := bruteFirstBad(c); bad != "" {
				t.Errorf("%s n=%d: brute force finds %s", kind, n, bad)
			}
		}
	}
}

// TestCheckCatchesBrokenPair makes sets i and j disjoint, keeping each
// set's own node, and expects Check and the brute force to name the same
// first bad pair.
func TestCheckCatchesBrokenPair(t *testing.T) {
	for _, kind := range Kinds() {
		for n := 2; n <= 64; n++ {
			c := mustNew(t, kind, n)
			i, j := n/3, n-1
			if i == j {
				i = 0
			}
			b := clone(c)
			b.Sets[i] = without(c.Sets[i], c.Sets[j], i)
			b.Sets[j] = without(c.Sets[j], c.Sets[i], j)
			want := bruteFirstBad(b)
			if want == "" {
				t.Fatalf("%s n=%d: test did not break sets %d and %d", kind, n, i, j)
			}
			err := b.Check()
			if err == nil {
				t.Fatalf("%s n=%d: Check accepted disjoint sets %d %v and %d %v", kind, n, i, b.Sets[i], j, b.Sets[j])
			}
			var x, y int
			fmt.Sscanf(want, "%d,%d", &x, &y)
			name := fmt.Sprintf("sets %d %v and %d %v do not intersect", x, b.Sets[x], y, b.Sets[y])
			if !strings.Contains(err.Error(), name) {
				t.Errorf("%s n=%d: Check = %q, want it to name %q", kind, n, err, name)
			}
		}
	}
}

func TestCheckCatchesBadSets(t *testing.T) {
	good := Coterie{Kind: "t", N: 3, Sets: [][]int{{0, 1}, {1, 2}, {0, 2}}}
	if err := good.Check(); err != nil {
		t.Fatalf("triangle: %v", err)
	}
	cases := []struct {
		name string
		c    Coterie
		want string
	}{
		{"no nodes", Coterie{N: 0}, "N=0"},
		{"too few sets", Coterie{N: 3, Sets: good.Sets[:2]}, "2 sets for N=3"},
		{"out of range", Coterie{N: 3, Sets: [][]int{{0, 1}, {1, 3}, {0, 2}}}, "node 3"},
		{"negative", Coterie{N: 3, Sets: [][]int{{-1, 0, 1}, {1, 2}, {0, 2}}}, "node -1"},
		{"unsorted", Coterie{N: 3, Sets: [][]int{{1, 0}, {1, 2}, {0, 2}}}, "set 0 is not strictly ascending"},
		{"duplicate", Coterie{N: 3, Sets: [][]int{{0, 1}, {1, 1, 2}, {0, 2}}}, "set 1 is not strictly ascending"},
		{"missing self", Coterie{N: 3, Sets: [][]int{{0, 1}, {0, 2}, {0, 2}}}, "does not contain node 1"},
		{"disjoint", Coterie{N: 3, Sets: [][]int{{0, 1}, {1, 2}, {2}}}, "sets 0 [0 1] and 2 [2] do not intersect"},
	}
	for _, tc := range cases {
		err := tc.c.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "coterie: ") {
			t.Errorf("%s: Check = %v, want coterie: ...%s...", tc.name, err, tc.want)
		}
		if bruteFirstBad(tc.c) == "" {
			t.Errorf("%s: brute force accepts it", tc.name)
		}
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New("ring", 5); err == nil || !strings.Contains(err.Error(), `"ring"`) ||
		!strings.Contains(err.Error(), "fpp, grid, tree, majority, all") {
		t.Errorf("New(ring) = %v, want the bad name and the kinds", err)
	}
	for _, kind := range Kinds() {
		for _, n := range []int{0, -3} {
			if _, err := New(kind, n); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("n=%d", n)) {
				t.Errorf("New(%q, %d) = %v, want an error naming n", kind, n, err)
			}
		}
	}
	k := Kinds()
	k[0] = "x"
	if Kinds()[0] != "fpp" {
		t.Error("Kinds returns the package's own slice")
	}
}

// oneBased converts the paper's 1-based sets, listed by node, to ours.
func oneBased(n int, sets map[int][]int) [][]int {
	out := make([][]int, n)
	for node, s := range sets {
		for _, x := range s {
			out[node-1] = append(out[node-1], x-1)
		}
	}
	return out
}

func TestFPPFigure1(t *testing.T) {
	fig := map[int][][]int{
		1: {{0}},
		2: {{0, 1}, {0, 1}},
		3: {{0, 1}, {1, 2}, {0, 2}},
		7: oneBased(7, map[int][]int{
			1: {1, 2, 3}, 4: {1, 4, 5}, 6: {1, 6, 7}, 2: {2, 4, 6},
			5: {2, 5, 7}, 7: {3, 4, 7}, 3: {3, 5, 6},
		}),
		13: oneBased(13, map[int][]int{
			1: {1, 2, 3, 4}, 5: {1, 5, 6, 7}, 8: {1, 8, 9, 10}, 11: {1, 11, 12, 13},
			2: {2, 5, 8, 11}, 6: {2, 6, 9, 12}, 7: {2, 7, 10, 13},
			10: {3, 5, 10, 12}, 3: {3, 6, 8, 13}, 9: {3, 7, 9, 11},
			13: {4, 5, 9, 13}, 4: {4, 6, 10, 11}, 12: {4, 7, 8, 12},
		}),
	}
	for n, want := range fig {
		c, err := FPP(n)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(c.Sets, want) {
			t.Errorf("FPP(%d) =\n%v\nwant\n%v", n, c.Sets, want)
		}
	}
}

// TestFPPPlanes checks Maekawa's properties (c) and (d) and the plane's
// one-point intersections for N = q²+q+1.
func TestFPPPlanes(t *testing.T) {
	for _, q := range []int{2, 3, 4, 5, 7, 8, 9, 16} {
		n := q*q + q + 1
		c, err := FPP(n)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range c.Sets {
			if len(s) != q+1 {
				t.Fatalf("q=%d: set %d has %d nodes, want %d", q, i, len(s), q+1)
			}
		}
		for j, l := range c.Load() {
			if l != q+1 {
				t.Fatalf("q=%d: node %d in %d sets, want %d", q, j, l, q+1)
			}
		}
		for i := range c.Sets {
			for j := i + 1; j < n; j++ {
				common := 0
				for _, x := range c.Sets[i] {
					if contains(c.Sets[j], x) {
						common++
					}
				}
				if common != 1 {
					t.Fatalf("q=%d: sets %d %v and %d %v share %d nodes, want 1", q, i, c.Sets[i], j, c.Sets[j], common)
				}
			}
		}
	}
}

// TestPlaneEveryPrimePower builds the plane for every prime power up to
// 64 and checks the counting properties that need no pairwise pass: each
// line has q+1 points including its own, each point is on q+1 lines.
func TestPlaneEveryPrimePower(t *testing.T) {
	for q := 2; q <= 64; q++ {
		if _, _, ok := primePower(q); !ok {
			if _, err := plane(q); err == nil {
				t.Errorf("plane(%d) accepted a non prime power", q)
			}
			continue
		}
		lines, err := plane(q)
		if err != nil {
			t.Fatalf("plane(%d): %v", q, err)
		}
		on := make([]int, q*q+q+1)
		for p, l := range lines {
			if len(l) != q+1 || !contains(l, p) {
				t.Fatalf("q=%d: line of point %d is %v", q, p, l)
			}
			for _, x := range l {
				on[x]++
			}
		}
		for p, k := range on {
			if k != q+1 {
				t.Fatalf("q=%d: point %d on %d lines", q, p, k)
			}
		}
	}
	c, err := FPP(1057) // q = 32, the first plane past 1024 nodes
	if err != nil {
		t.Fatal(err)
	}
	if lo, hi, _ := c.Sizes(); lo != 33 || hi != 33 {
		t.Errorf("FPP(1057) K=%d..%d, want 33", lo, hi)
	}
}

func TestPrimePower(t *testing.T) {
	isPrime := func(p int) bool {
		for d := 2; d < p; d++ {
			if p%d == 0 {
				return false
			}
		}
		return p >= 2
	}
	for q := -1; q <= 200; q++ {
		want := false
		for p := 2; p <= q; p++ {
			if isPrime(p) {
				for x := p; x <= q; x *= p {
					want = want || x == q
				}
			}
		}
		if _, _, got := primePower(q); got != want {
			t.Errorf("primePower(%d) = %v, want %v", q, got, want)
		}
	}
	if _, err := newField(12); err == nil || !strings.Contains(err.Error(), "12") {
		t.Errorf("newField(12) = %v, want an error naming 12", err)
	}
}

// TestFieldAxioms checks GF(q) by brute force over all elements.
func TestFieldAxioms(t *testing.T) {
	for _, q := range []int{2, 3, 4, 5, 8, 9, 16, 27, 32} {
		f, err := newField(q)
		if err != nil {
			t.Fatal(err)
		}
		// Tables from the field's own operations; the checks below use
		// only the tables, so what they test is f.add and f.mul.
		add := make([][]int, q)
		mul := make([][]int, q)
		for a := 0; a < q; a++ {
			add[a], mul[a] = make([]int, q), make([]int, q)
			for b := 0; b < q; b++ {
				add[a][b], mul[a][b] = f.add(a, b), f.mul(a, b)
				if add[a][b] < 0 || add[a][b] >= q || mul[a][b] < 0 || mul[a][b] >= q {
					t.Fatalf("GF(%d): %d+%d=%d, %d*%d=%d out of range", q, a, b, add[a][b], a, b, mul[a][b])
				}
				if f.m == 1 && (add[a][b] != (a+b)%q || mul[a][b] != a*b%q) {
					t.Fatalf("GF(%d) is not integers mod %d at %d, %d", q, q, a, b)
				}
				if f.sub(add[a][b], b) != a {
					t.Fatalf("GF(%d): (%d+%d)-%d != %d", q, a, b, b, a)
				}
			}
		}
		for a := 0; a < q; a++ {
			if add[a][0] != a || mul[a][1] != a || mul[a][0] != 0 {
				t.Fatalf("GF(%d): identities fail at %d", q, a)
			}
			if add[a][f.neg(a)] != 0 {
				t.Fatalf("GF(%d): %d + neg = %d", q, a, add[a][f.neg(a)])
			}
			if a != 0 {
				b, ok := f.inv(a)
				if !ok || mul[a][b] != 1 {
					t.Fatalf("GF(%d): %d has no inverse", q, a)
				}
			}
			for b := 0; b < q; b++ {
				if add[a][b] != add[b][a] || mul[a][b] != mul[b][a] {
					t.Fatalf("GF(%d): not commutative at %d, %d", q, a, b)
				}
				for c := 0; c < q; c++ {
					if add[add[a][b]][c] != add[a][add[b][c]] {
						t.Fatalf("GF(%d): + not associative at %d %d %d", q, a, b, c)
					}
					if mul[mul[a][b]][c] != mul[a][mul[b][c]] {
						t.Fatalf("GF(%d): * not associative at %d %d %d", q, a, b, c)
					}
					if mul[a][add[b][c]] != add[mul[a][b]][mul[a][c]] {
						t.Fatalf("GF(%d): not distributive at %d %d %d", q, a, b, c)
					}
				}
			}
		}
	}
}

func TestGridSquares(t *testing.T) {
	for s := 1; s <= 8; s++ {
		c, err := Grid(s * s)
		if err != nil {
			t.Fatal(err)
		}
		if lo, hi, _ := c.Sizes(); lo != 2*s-1 || hi != 2*s-1 {
			t.Errorf("Grid(%d): K=%d..%d, want %d", s*s, lo, hi, 2*s-1)
		}
		for j, l := range c.Load() {
			if l != 2*s-1 {
				t.Errorf("Grid(%d): node %d in %d sets, want %d", s*s, j, l, 2*s-1)
			}
		}
	}
	c, _ := Grid(7) // 3 columns: rows {0,1,2} {3,4,5} {6}
	want := [][]int{{0, 1, 2, 3, 6}, {0, 1, 2, 4}, {0, 1, 2, 5}, {0, 3, 4, 5, 6}, {1, 3, 4, 5}, {2, 3, 4, 5}, {0, 3, 6}}
	if !reflect.DeepEqual(c.Sets, want) {
		t.Errorf("Grid(7) = %v, want %v", c.Sets, want)
	}
}

func TestMajorityAndAll(t *testing.T) {
	for n := 1; n <= 64; n++ {
		m, _ := Majority(n)
		for j, l := range m.Load() {
			if len(m.Sets[j]) != n/2+1 || l != n/2+1 {
				t.Fatalf("Majority(%d): node %d has K=%d load=%d, want %d", n, j, len(m.Sets[j]), l, n/2+1)
			}
		}
		a, _ := All(n)
		for j, s := range a.Sets {
			if len(s) != n || s[0] != 0 || s[n-1] != n-1 {
				t.Fatalf("All(%d): set %d = %v", n, j, s)
			}
		}
	}
	m, _ := Majority(5)
	if want := [][]int{{0, 1, 2}, {1, 2, 3}, {2, 3, 4}, {0, 3, 4}, {0, 1, 4}}; !reflect.DeepEqual(m.Sets, want) {
		t.Errorf("Majority(5) = %v, want %v", m.Sets, want)
	}
}

func TestSizesLoadString(t *testing.T) {
	c := Coterie{Kind: "x", N: 3, Sets: [][]int{{0, 1}, {0, 1, 2}, {0, 2}}}
	if lo, hi, mean := c.Sizes(); lo != 2 || hi != 3 || mean != 7.0/3 {
		t.Errorf("Sizes = %d %d %v", lo, hi, mean)
	}
	if got := c.Load(); !reflect.DeepEqual(got, []int{3, 2, 2}) {
		t.Errorf("Load = %v", got)
	}
	if got := c.String(); got != "x N=3 K=2..3 (mean 2.33)" {
		t.Errorf("String = %q", got)
	}
	g, _ := Grid(16)
	if got := g.String(); got != "grid N=16 K=7" {
		t.Errorf("String = %q", got)
	}
}

// treeQuorums enumerates, independently of TreeQuorum, every quorum of
// the heap-ordered tree of n <= 64 nodes as a bit mask: Q(leaf) = {x};
// Q(x) = {x}+Q(child) for each child, plus Q(left)×Q(right) (or Q(left)
// alone for a single child) for x replaced.
func treeQuorums(n, x int) []uint64 {
	l, r := 2*x+1, 2*x+2
	if l >= n {
		return []uint64{1 << x}
	}
	ql := treeQuorums(n, l)
	var qr []uint64
	if r < n {
		qr = treeQuorums(n, r)
	}
	var out []uint64
	for _, a := range append(append([]uint64(nil), ql...), qr...) {
		out = append(out, a|1<<x)
	}
	if r >= n {
		return append(out, ql...)
	}
	for _, a := range ql {
		for _, b := range qr {
			out = append(out, a|b)
		}
	}
	return out
}

func mask(s []int) uint64 {
	var m uint64
	for _, x := range s {
		m |= 1 << x
	}
	return m
}

// leaves returns the prefer values that steer TreeQuorum differently: a
// prefer at an inner node steers exactly like the leftmost leaf below it,
// so the leaves, plus -1 for no preference, cover every behaviour.
func leaves(n int) []int {
	out := []int{-1}
	for x := 0; x < n; x++ {
		if 2*x+1 >= n {
			out = append(out, x)
		}
	}
	return out
}

func TestTreeAllAlive(t *testing.T) {
	for n := 1; n <= 64; n++ {
		c, _ := Tree(n)
		for i := range c.Sets {
			for _, alive := range []func(int) bool{nil, func(int) bool { return true }} {
				got, ok := TreeQuorum(n, i, alive)
				if !ok || !reflect.DeepEqual(got, c.Sets[i]) {
					t.Fatalf("TreeQuorum(%d, %d, all up) = %v %v, want %v", n, i, got, ok, c.Sets[i])
				}
			}
			// An inner prefer steers like the leftmost leaf below it.
			leaf := i
			for 2*leaf+1 < n {
				leaf = 2*leaf + 1
			}
			if !reflect.DeepEqual(c.Sets[i], c.Sets[leaf]) {
				t.Fatalf("Tree(%d): set %d %v differs from set of leaf %d %v", n, i, c.Sets[i], leaf, c.Sets[leaf])
			}
		}
		for _, far := range []int{-1, n, n + 5} {
			if got, _ := TreeQuorum(n, far, nil); !reflect.DeepEqual(got, c.Sets[0]) {
				t.Errorf("TreeQuorum(%d, %d) = %v, want the left path %v", n, far, got, c.Sets[0])
			}
		}
	}
	for _, n := range []int{7, 15, 31, 63} {
		c, _ := Tree(n)
		want := bits.Len(uint(n))
		if lo, hi, _ := c.Sizes(); lo != want || hi != want {
			t.Errorf("Tree(%d): K=%d..%d, want log2(N+1)=%d", n, lo, hi, want)
		}
	}
}

// checkTree runs TreeQuorum for one dead set and every steering prefer,
// checking each result against the enumerated quorums, and records the
// distinct quorums returned.
func checkTree(t *testing.T, n int, dead uint64, list []uint64, quorums, seen map[uint64]bool) {
	t.Helper()
	alive := func(x int) bool { return dead>>x&1 == 0 }
	exists := false
	for _, q := range list {
		if q&dead == 0 {
			exists = true
			break
		}
	}
	for _, prefer := range leaves(n) {
		got, ok := TreeQuorum(n, prefer, alive)
		if ok != exists {
			t.Fatalf("n=%d dead=%b prefer=%d: ok=%v, but a quorum exists: %v", n, dead, prefer, ok, exists)
		}
		if !ok {
			continue
		}
		m := mask(got)
		if !quorums[m] || m&dead != 0 || bits.OnesCount64(m) != len(got) {
			t.Fatalf("n=%d dead=%b prefer=%d: %v is not a live tree quorum", n, dead, prefer, got)
		}
		seen[m] = true
	}
}

func pairwise(t *testing.T, n int, seen map[uint64]bool) {
	t.Helper()
	var all []uint64
	for m := range seen {
		all = append(all, m)
	}
	for i, a := range all {
		for _, b := range all[i:] {
			if a&b == 0 {
				t.Fatalf("n=%d: returned quorums %b and %b are disjoint", n, a, b)
			}
		}
	}
}

// TestTreeEveryDeadSet tries every set of dead nodes for n <= 15.
func TestTreeEveryDeadSet(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 15; n++ {
		list := treeQuorums(n, 0)
		quorums := map[uint64]bool{}
		for _, q := range list {
			quorums[q] = true
		}
		seen := map[uint64]bool{}
		biggest := 0
		for dead := uint64(0); dead < 1<<n; dead++ {
			checkTree(t, n, dead, list, quorums, seen)
		}
		pairwise(t, n, seen)
		for m := range seen {
			biggest = max(biggest, bits.OnesCount64(m))
		}
		if n == 7 || n == 15 {
			if biggest != (n+1)/2 {
				t.Errorf("n=%d: largest quorum %d, want (N+1)/2=%d", n, biggest, (n+1)/2)
			}
		}
		if len(seen) != len(quorums) {
			t.Errorf("n=%d: TreeQuorum returned %d of the %d tree quorums", n, len(seen), len(quorums))
		}
	}
}

// TestTreeFewDead tries every dead set of size <= 2 for n <= 64.
func TestTreeFewDead(t *testing.T) {
	t.Parallel()
	for n := 16; n <= 64; n++ {
		sub := subtrees(n)
		prefers := leaves(n)
		seen := map[uint64]bool{}
		for a := -1; a < n; a++ {
			for b := a; b < n; b++ {
				var dead uint64
				if a >= 0 {
					dead |= 1 << a
				}
				if b >= 0 {
					dead |= 1 << b
				}
				// No enumeration: Q is too big past 15 nodes. Membership
				// is checked by isTreeQuorum instead.
				alive := func(x int) bool { return dead>>x&1 == 0 }
				for _, prefer := range prefers {
					got, ok := TreeQuorum(n, prefer, alive)
					m := mask(got)
					if !ok || m&dead != 0 || !isTreeQuorum(n, 0, m, sub) {
						t.Fatalf("n=%d dead=%v,%v prefer=%d: %v %v", n, a, b, prefer, got, ok)
					}
					seen[m] = true
				}
			}
		}
		pairwise(t, n, seen)
	}
}

// isTreeQuorum reports whether m, restricted to x's subtree, is a quorum
// of that subtree and holds nothing else of it (the recognising dual of
// treeQuorums). sub[y] is the mask of y's subtree.
func isTreeQuorum(n, x int, m uint64, sub []uint64) bool {
	l, r := 2*x+1, 2*x+2
	has := m>>x&1 == 1
	if l >= n {
		return has
	}
	empty := func(y int) bool { return y >= n || m&sub[y] == 0 }
	if has {
		return (isTreeQuorum(n, l, m, sub) && empty(r)) || (r < n && isTreeQuorum(n, r, m, sub) && empty(l))
	}
	return isTreeQuorum(n, l, m, sub) && (r >= n || isTreeQuorum(n, r, m, sub))
}

// subtrees returns the mask of every node's subtree.
func subtrees(n int) []uint64 {
	sub := make([]uint64, n)
	for x := n - 1; x >= 0; x-- {
		sub[x] = 1 << x
		for _, c := range []int{2*x + 1, 2*x + 2} {
			if c < n {
				sub[x] |= sub[c]
			}
		}
	}
	return sub
}

func TestTreeWorstCases(t *testing.T) {
	deadSet := func(ids ...int) func(int) bool {
		return func(x int) bool { return !contains(ids, x) }
	}
	cases := []struct {
		n    int
		dead []int
		want []int
	}{
		// Root down: a path under each child, 2·(log2(N+1)-1) = (N+1)/2 for N=7.
		{7, []int{0}, []int{1, 2, 3, 5}},
		{15, []int{0}, []int{1, 2, 3, 5, 7, 11}},
		// Every inner node down: all the leaves, (N+1)/2.
		{7, []int{0, 1, 2}, []int{3, 4, 5, 6}},
		{15, []int{0, 1, 2, 3, 4, 5, 6}, []int{7, 8, 9, 10, 11, 12, 13, 14}},
		// Root up, preferred left child down: it is replaced by paths
		// under both its children, rather than switching to the right.
		{7, []int{1}, []int{0, 3, 4}},
		{7, []int{1, 3}, []int{0, 2, 5}},
		// A dead node with one child is replaced by that child.
		{4, []int{1}, []int{0, 3}},
		{4, []int{0, 1}, []int{2, 3}},
		// An up node whose only child is dead cannot stand alone.
		{4, []int{0, 2}, nil},
	}
	for _, tc := range cases {
		got, ok := TreeQuorum(tc.n, 0, deadSet(tc.dead...))
		if ok != (tc.want != nil) || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("TreeQuorum(%d, dead %v) = %v %v, want %v", tc.n, tc.dead, got, ok, tc.want)
		}
	}
	for n := 1; n <= 64; n++ {
		var dead []int
		for x := 0; x < n; x++ {
			if 2*x+1 >= n {
				dead = append(dead, x)
			}
		}
		if got, ok := TreeQuorum(n, 0, deadSet(dead...)); ok {
			t.Errorf("n=%d: all leaves down, still got quorum %v", n, got)
		}
	}
	if _, ok := TreeQuorum(0, 0, nil); ok {
		t.Error("TreeQuorum(0) found a quorum")
	}
}

// TestTable logs K and the worst load per kind; run with -v to see it.
func TestTable(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-9s %5s %6s %6s %7s %8s\n", "kind", "N", "minK", "maxK", "meanK", "maxLoad")
	for _, kind := range Kinds() {
		for _, n := range []int{4, 7, 9, 13, 16, 31, 57, 64} {
			c := mustNew(t, kind, n)
			lo, hi, mean := c.Sizes()
			worst := 0
			for _, l := range c.Load() {
				worst = max(worst, l)
			}
			fmt.Fprintf(&b, "%-9s %5d %6d %6d %7.2f %8d\n", kind, n, lo, hi, mean, worst)
		}
	}
	t.Log(b.String())
}

func isPP(q int) bool { _, _, ok := primePower(q); return ok }

// TestFPPDegenerate checks the folded planes: K never exceeds q+1 and the
// greedy fold keeps the worst load within 2q (one dropped point's worth).
func TestFPPDegenerate(t *testing.T) {
	for n := 4; n <= 120; n++ {
		q := planeOrder(n)
		if !isPP(q) || q*q+q+1 < n {
			t.Fatalf("planeOrder(%d) = %d, too small", n, q)
		}
		for r := 2; r < q; r++ {
			if isPP(r) && r*r+r+1 >= n {
				t.Fatalf("planeOrder(%d) = %d, but %d fits", n, q, r)
			}
		}
		c, _ := FPP(n)
		_, hi, _ := c.Sizes()
		worst := 0
		for _, l := range c.Load() {
			worst = max(worst, l)
		}
		if hi > q+1 || worst > 2*q {
			t.Errorf("FPP(%d) on the plane of order %d: K up to %d, load up to %d; want <= %d and <= %d", n, q, hi, worst, q+1, 2*q)
		}
	}
	for n, want := range map[int]int{8: 4, 14: 5, 32: 9} {
		c, _ := FPP(n)
		worst := 0
		for _, l := range c.Load() {
			worst = max(worst, l)
		}
		if worst != want {
			t.Errorf("FPP(%d): worst load %d, want %d", n, worst, want)
		}
	}
}
