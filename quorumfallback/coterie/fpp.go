package coterie

import (
	"fmt"
	"sort"
)

// FPP builds Maekawa's coterie from a finite projective plane (Maekawa
// 1985, section 3). When n = q²+q+1 for a prime power q every set is a
// line of the plane of order q: K = q+1, every node is in exactly q+1
// sets, and two sets meet in exactly one node. For n = 7 and n = 13 the
// sets are those of the paper's Figure 1(b) and 1(c), shifted to 0-based.
// Other n get a degenerate coterie; see the package documentation.
func FPP(n int) (Coterie, error) {
	if err := checkN("fpp", n); err != nil {
		return Coterie{}, err
	}
	var sets [][]int
	switch n {
	case 1:
		sets = [][]int{{0}}
	case 2:
		// Figure 1(a) cut down to two nodes: {1,2} survives for both.
		sets = [][]int{{0, 1}, {0, 1}}
	case 3:
		// Figure 1(a), the K = 2 triangle: a "plane of order 1".
		sets = [][]int{{0, 1}, {1, 2}, {0, 2}}
	default:
		lines, err := plane(planeOrder(n))
		if err != nil {
			return Coterie{}, err
		}
		sets = fold(lines, n)
	}
	return Coterie{Kind: "fpp", N: n, Sets: sets}, nil
}

// planeOrder returns the smallest prime power q whose plane has room for
// n nodes, q²+q+1 >= n: the smallest plane keeps K = q+1 near sqrt(n).
func planeOrder(n int) int {
	q := 2
	for {
		if _, _, ok := primePower(q); ok && q*q+q+1 >= n {
			return q
		}
		q++
	}
}

// plane returns the q²+q+1 lines of the projective plane of order q (a
// prime power), 0-based, each sorted, with lines[P] the line assigned to
// point P; it contains P.
//
// Points, in the 1-based numbering of Maekawa's Figure 1: point 1; points
// 2..q+1, point 2+a being "direction a"; then q groups B_0..B_{q-1} of q
// points each, B_b[e] = q+2+b·q+e. This is the affine plane over GF(q)
// (the groups are its vertical lines, e the height) closed by the points
// at infinity: point 1 for the vertical direction, 2+a for slope -a.
//
//	lines through 1:   {1, 2, ..., q+1} and {1} ∪ B_b for each b
//	lines through 2+a: {2+a} ∪ {B_b[j - a·b] : b = 0..q-1}, j = 0..q-1
//
// with j - a·b computed in GF(q). Assignment: {1, ..., q+1} to point 1;
// {1} ∪ B_b to B_b[0]; of the q lines through 2+a, the one containing
// B_a[0] to 2+a itself and each other one to the single point it has in
// B_a (j -> B_a[j - a·a] is a bijection, so each B_a[e], e > 0, gets one).
// This reproduces Figure 1(b) and 1(c) exactly.
func plane(q int) ([][]int, error) {
	f, err := newField(q)
	if err != nil {
		return nil, err
	}
	// 0-based: point 1 -> 0, point 2+a -> 1+a, B_b[e] -> q+1+b·q+e.
	group := func(b, e int) int { return q + 1 + b*q + e }
	lines := make([][]int, q*q+q+1)
	top := make([]int, q+1)
	for k := range top {
		top[k] = k
	}
	lines[0] = top
	for b := 0; b < q; b++ {
		l := []int{0}
		for e := 0; e < q; e++ {
			l = append(l, group(b, e))
		}
		lines[group(b, 0)] = l
	}
	ab := make([]int, q) // ab[b] = a·b for the current a
	for a := 0; a < q; a++ {
		for b := range ab {
			ab[b] = f.mul(a, b)
		}
		for j := 0; j < q; j++ {
			// Ascending as built: 1+a < every group point, and groups
			// are numbered in order of b.
			l := []int{1 + a}
			for b := 0; b < q; b++ {
				l = append(l, group(b, f.sub(j, ab[b])))
			}
			owner := 1 + a
			if e := f.sub(j, ab[a]); e != 0 {
				owner = group(a, e)
			}
			lines[owner] = l
		}
	}
	for p, l := range lines {
		if l == nil {
			// Unreachable if the assignment above is a bijection.
			return nil, fmt.Errorf("coterie: plane of order %d assigns no line to point %d", q, p)
		}
	}
	return lines, nil
}

// fold turns the plane's lines into a coterie of n <= len(lines) nodes
// (with n = len(lines) it returns the lines unchanged):
// every point p >= n is sent to a node target(p) < n, and node i takes the
// image of lines[i], deduplicated and sorted. Any two lines meet in a
// point, so their images meet in that point's image, and i < n is its own
// image, so every set still contains its node: the result is a coterie
// whatever the targets are. The targets only decide sizes and load.
//
// They are chosen greedily, in increasing p: the node whose load after
// taking p is smallest (ties: the one adding fewest set entries, then the
// smallest id). Sending p to t adds t to every used line through p that
// does not have t yet, so t's load grows by about q; the greedy choice
// spreads those increments over nodes that start light (those lying on
// the unused lines of the dropped points). Compared with p mod n it lowers
// the worst load markedly when many points are dropped, just above a plane
// size (n = 8: 4 instead of 6; n = 14: 5 instead of 8; n = 32: 9 instead
// of 13), and did no worse, in worst load or largest set, for any n from
// 4 to 400. Just below a plane size (one point dropped) the worst load is
// 2q whatever the target: the target keeps its own lines and joins the q
// or so used lines through the dropped point.
func fold(lines [][]int, n int) [][]int {
	image := make([][]int, n) // image[i]: nodes of node i's set so far
	load := make([]int, n)
	through := make([][]int, len(lines)) // used lines (ids < n) through each point
	for i := range image {
		for _, p := range lines[i] {
			through[p] = append(through[p], i)
			if p < n {
				image[i] = append(image[i], p)
				load[p]++
			}
		}
	}
	count := make([]int, n) // count[t]: used lines through p already holding t
	for p := n; p < len(lines); p++ {
		for _, i := range through[p] {
			for _, t := range image[i] {
				count[t]++
			}
		}
		used := len(through[p])
		best, bestLoad, bestAdd := -1, 0, 0
		for t := range count {
			add := used - count[t]
			if best < 0 || load[t]+add < bestLoad || (load[t]+add == bestLoad && add < bestAdd) {
				best, bestLoad, bestAdd = t, load[t]+add, add
			}
		}
		for _, i := range through[p] {
			for _, t := range image[i] {
				count[t] = 0
			}
		}
		for _, i := range through[p] {
			if !contains(image[i], best) {
				image[i] = append(image[i], best)
			}
		}
		load[best] = bestLoad
	}
	for _, s := range image {
		sort.Ints(s)
	}
	return image
}

// contains reports whether x is in the short, unsorted slice s.
func contains(s []int, x int) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}
