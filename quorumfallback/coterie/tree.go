package coterie

import (
	"math/bits"
	"sort"
)

// Tree lays the n nodes out as a binary tree in heap order (node 0 is the
// root, node x has children 2x+1 and 2x+2 when those are < n) and gives
// node i the Agrawal–El Abbadi quorum it uses when every node is up: the
// path from the root down to i, continued below i to a leaf by always
// taking the left child. The left child is the rule because it always
// exists for an inner node of a heap-ordered tree, so the path never has
// to choose; the price is that leftmost leaves carry more load than the
// others (and the root is in every set whatever the rule).
//
// K is the depth of the leaf reached plus one: log2(n+1) for a full tree.
// TreeQuorum gives the quorums that avoid dead nodes.
func Tree(n int) (Coterie, error) {
	if err := checkN("tree", n); err != nil {
		return Coterie{}, err
	}
	sets := make([][]int, n)
	for i := range sets {
		var s []int
		// i and its ancestors up to, not including, the root; then the root.
		for x := i; x > 0; x = (x - 1) / 2 {
			s = append(s, x)
		}
		s = append(s, 0)
		for x := 2*i + 1; x < n; x = 2*x + 1 {
			s = append(s, x)
		}
		sort.Ints(s)
		sets[i] = s
	}
	return Coterie{Kind: "tree", N: n, Sets: sets}, nil
}

// TreeQuorum returns a tree quorum of the n heap-ordered nodes (see Tree)
// made only of nodes for which alive returns true, sorted ascending, and
// whether one exists. A nil alive means every node is up.
//
// The rule is Agrawal and El Abbadi's, applied from the root:
//
//	quorum(x) = {x} ∪ quorum(c)            if x is up, for a child c
//	                                       (just {x} if x is a leaf)
//	quorum(x) = quorum(left) ∪ quorum(right) if x is down: both must exist
//
// A down leaf has no quorum. A down node with a single child is replaced
// by that child's quorum alone, which keeps the intersection argument
// intact: that quorum meets every quorum of the child's subtree, and every
// quorum through the node contains one of those. An up node with a single
// child needs the child's quorum too; {x} alone would miss the quorums
// that replace x by its child.
//
// Any two quorums meet: by induction on the subtree, two quorums that both
// contain x meet at x, and otherwise one of them contains a full quorum of
// the child subtree the other one also uses (a down x contributes a
// quorum of each child). The sizes run from the depth of a leaf plus one
// (log2(n+1) for a full tree) up to (n+1)/2, the leaves, when every inner
// node is down.
//
// An up node first tries the child on the way to prefer (the left child
// once prefer is passed, as Tree does) and falls back to the other child,
// so with every node up the result equals Tree(n).Sets[prefer]. A prefer
// outside 0..n-1 means no preference: left children throughout.
//
// Each node is visited at most once, so alive is called at most n times.
func TreeQuorum(n, prefer int, alive func(int) bool) ([]int, bool) {
	if n < 1 {
		return nil, false
	}
	if alive == nil {
		alive = func(int) bool { return true }
	}
	if prefer >= n {
		prefer = -1 // below treats negative ids as in no subtree
	}
	// Room for a path under each child of a dead node near the top: one
	// allocation in the common cases, and append copes with the rest.
	out := make([]int, 0, 2*bits.Len(uint(n)))
	// build appends a quorum of x's subtree to out and reports success;
	// on failure it leaves out as it found it.
	var build func(x int) bool
	build = func(x int) bool {
		l, r := 2*x+1, 2*x+2
		mark := len(out)
		if !alive(x) {
			if l >= n {
				return false
			}
			if build(l) && (r >= n || build(r)) {
				return true
			}
			out = out[:mark]
			return false
		}
		out = append(out, x)
		if l >= n {
			return true
		}
		first, second := l, r
		if r < n && below(r, prefer) {
			first, second = r, l
		}
		if build(first) || (second < n && build(second)) {
			return true
		}
		out = out[:mark]
		return false
	}
	if !build(0) {
		return nil, false
	}
	sort.Ints(out)
	return out, true
}

// below reports whether node p lies in the subtree rooted at x (x
// included); parents have smaller ids, so walking p upwards can stop as
// soon as it is no longer above x.
func below(x, p int) bool {
	if p < 0 {
		return false
	}
	for p > x {
		p = (p - 1) / 2
	}
	return p == x
}
