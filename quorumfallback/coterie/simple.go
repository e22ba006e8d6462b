package coterie

import "sort"

// Majority gives node i the ⌊n/2⌋+1 nodes i, i+1, ... (mod n): Thomas's
// majority consensus. Any two majorities of n nodes overlap because their
// sizes sum to more than n; rotating the window from i spreads the load
// evenly (every node is in exactly ⌊n/2⌋+1 sets).
func Majority(n int) (Coterie, error) {
	if err := checkN("majority", n); err != nil {
		return Coterie{}, err
	}
	k := n/2 + 1
	sets := make([][]int, n)
	for i := range sets {
		s := make([]int, k)
		for d := range s {
			s[d] = (i + d) % n
		}
		sort.Ints(s)
		sets[i] = s
	}
	return Coterie{Kind: "majority", N: n, Sets: sets}, nil
}

// All gives every node the set of all nodes: Ricart and Agrawala's
// unanimous consensus, the K = N baseline the others are measured against.
func All(n int) (Coterie, error) {
	if err := checkN("all", n); err != nil {
		return Coterie{}, err
	}
	sets := make([][]int, n)
	for i := range sets {
		s := make([]int, n)
		for j := range s {
			s[j] = j
		}
		sets[i] = s
	}
	return Coterie{Kind: "all", N: n, Sets: sets}, nil
}

// Grid lays the nodes out row by row in a matrix of S = ceil(sqrt(n))
// columns and gives node p its row plus its column, V_p = R_i ∪ C_j
// (K = 2S-1 when n = S²).
//
// When n is not a square the last row is partial, and the sets still
// intersect. Take p in row r, column c and p' in row r', column c'. Only
// the last row can be partial. If row r is full it has a node at column
// c', which lies in R_r ⊆ V_p and in C_c' ⊆ V_p'. Symmetrically if row r'
// is full. Otherwise both are in the (partial, nonempty) last row and
// share it. A column that does not reach the last row is simply shorter,
// so its nodes get a smaller K than the rest.
func Grid(n int) (Coterie, error) {
	if err := checkN("grid", n); err != nil {
		return Coterie{}, err
	}
	s := 1
	for s*s < n {
		s++
	}
	sets := make([][]int, n)
	for p := range sets {
		row, col := p/s, p%s
		var set []int
		for q := row * s; q < n && q < row*s+s; q++ {
			set = append(set, q)
		}
		for q := col; q < n; q += s {
			if q/s != row {
				set = append(set, q)
			}
		}
		sort.Ints(set)
		sets[p] = set
	}
	return Coterie{Kind: "grid", N: n, Sets: sets}, nil
}
