// Package coterie builds the quorums (request sets) of Maekawa-style
// mutual exclusion. Nodes are numbered 0..N-1 and node i asks every
// member of Sets[i] for permission; the one property that makes this safe
// is that any two sets intersect (Maekawa 1985, property (a)), so some
// node arbitrates between any two requesters. Every set also contains its
// own node (property (b)), saving a message.
//
// The kinds, and what they cost per request (K, the set size) and per
// arbiter (load, how many sets hold a node):
//
//   - fpp: Maekawa's finite projective plane; K ≈ sqrt(N).
//   - grid: row plus column of a sqrt(N) × sqrt(N) matrix; K ≈ 2 sqrt(N).
//   - tree: Agrawal and El Abbadi's root-to-leaf paths; K ≈ log2 N with
//     every node up, and TreeQuorum rebuilds quorums around dead nodes.
//   - majority: ⌊N/2⌋+1 consecutive nodes (Thomas).
//   - all: every node (Ricart and Agrawala); K = N.
//
// The package is pure computation: no I/O, no goroutines, no clock.
//
// # Projective planes and the degenerate case
//
// When N = q²+q+1 for a prime power q the fpp sets are the lines of the
// projective plane of order q over GF(q) (built by plane, with GF(p^m)
// implemented here), satisfying all of Maekawa's properties: K = q+1,
// every node in exactly q+1 sets, two sets meeting in exactly one node.
// N = 7 and N = 13 give the paper's Figure 1(b) and 1(c).
//
// Maekawa builds other N from a "degenerated set" (his section 7, missing
// from our copy). Ours: take the smallest prime power q with q²+q+1 >= N,
// build that plane with each line assigned to one of its points, send
// every point p >= N to a node below N, and give node i the image of the
// line assigned to point i. Images of intersecting lines intersect, so
// this is always a coterie; K stays at most q+1 and the price is uneven
// load, since a node that absorbs a dropped point joins about q extra
// sets. Which node absorbs which point is chosen greedily to keep the
// worst load low (see fold). N <= 3 uses Figure 1(a), the K = 2 triangle
// {0,1} {1,2} {0,2}, cut down to {0,1} for both nodes at N = 2 and {0} at
// N = 1.
package coterie
