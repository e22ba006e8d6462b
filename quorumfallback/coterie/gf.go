package coterie

import "fmt"

// field is GF(q) for a prime power q = p^m. An element is stored as its
// index 0..q-1: the base-p digits of the index, least significant first,
// are the coefficients of a polynomial of degree < m, reduced modulo a
// monic irreducible polynomial of degree m. Index 0 is therefore the zero
// polynomial and, for m = 1, index k is the integer k mod p, so the prime
// case is plain modular arithmetic and reproduces Maekawa's Figure 1.
//
// Arithmetic is done digit by digit instead of through q×q tables: the
// plane construction needs O(q²) products and O(q³) differences, and
// tables would cost O(q²) memory that buys nothing at those counts.
type field struct {
	p, m, q int
	// mod holds the m+1 coefficients of the reduction polynomial, low
	// degree first; mod[m] == 1.
	mod []int
}

// primePower reports whether q = p^m for a prime p and m >= 1.
func primePower(q int) (p, m int, ok bool) {
	if q < 2 {
		return 0, 0, false
	}
	for p = 2; p*p <= q; p++ {
		if q%p == 0 {
			break
		}
	}
	if p*p > q {
		return q, 1, true // q itself is prime
	}
	for q%p == 0 {
		q /= p
		m++
	}
	return p, m, q == 1
}

// newField builds GF(q), finding the reduction polynomial by brute force:
// the first monic polynomial of degree m, in index order of its lower
// coefficients, that no monic polynomial of degree 1..m/2 divides. Such a
// polynomial always exists, and brute force is cheap for the small q a
// coterie needs (q ≈ sqrt(N)).
func newField(q int) (*field, error) {
	p, m, ok := primePower(q)
	if !ok {
		return nil, fmt.Errorf("coterie: field order %d is not a prime power", q)
	}
	f := &field{p: p, m: m, q: q}
	if m == 1 {
		f.mod = []int{0, 1} // x: reduces a constant to itself
		return f, nil
	}
	for low := 0; low < q; low++ {
		cand := append(f.digits(low), 1)
		if irreducible(cand, p) {
			f.mod = cand
			return f, nil
		}
	}
	// Unreachable: irreducible polynomials of every degree exist.
	return nil, fmt.Errorf("coterie: no irreducible polynomial of degree %d over GF(%d)", m, p)
}

// digits returns the m base-p digits of index x, least significant first.
func (f *field) digits(x int) []int {
	d := make([]int, f.m)
	for k := range d {
		d[k] = x % f.p
		x /= f.p
	}
	return d
}

// index is the inverse of digits.
func (f *field) index(d []int) int {
	x := 0
	for k := len(d) - 1; k >= 0; k-- {
		x = x*f.p + d[k]
	}
	return x
}

// add returns a+b: digit-wise addition mod p, as polynomials add.
func (f *field) add(a, b int) int {
	x, w := 0, 1
	for k := 0; k < f.m; k++ {
		x += ((a%f.p + b%f.p) % f.p) * w
		a, b, w = a/f.p, b/f.p, w*f.p
	}
	return x
}

// neg returns -a.
func (f *field) neg(a int) int {
	x, w := 0, 1
	for k := 0; k < f.m; k++ {
		x += ((f.p - a%f.p) % f.p) * w
		a, w = a/f.p, w*f.p
	}
	return x
}

// sub returns a-b.
func (f *field) sub(a, b int) int { return f.add(a, f.neg(b)) }

// mul returns a*b: the polynomial product reduced modulo f.mod.
func (f *field) mul(a, b int) int {
	if f.m == 1 {
		return a * b % f.p
	}
	da, db := f.digits(a), f.digits(b)
	prod := make([]int, 2*f.m-1)
	for i, x := range da {
		for j, y := range db {
			prod[i+j] = (prod[i+j] + x*y) % f.p
		}
	}
	return f.index(polyMod(prod, f.mod, f.p)[:f.m])
}

// inv returns the multiplicative inverse of a != 0. It searches, which is
// fine for the field sizes used here and keeps the code obviously right;
// the constructions never call it, only the tests do.
func (f *field) inv(a int) (int, bool) {
	for b := 1; b < f.q; b++ {
		if f.mul(a, b) == 1 {
			return b, true
		}
	}
	return 0, false
}

// polyMod returns a mod d over GF(p), with d monic. The result has
// len(d)-1 coefficients (padded with zeros), low degree first.
func polyMod(a, d []int, p int) []int {
	r := append([]int(nil), a...)
	n := len(d) - 1
	for k := len(r) - 1; k >= n; k-- {
		c := r[k]
		if c == 0 {
			continue
		}
		// Subtract c * x^(k-n) * d, which clears r[k] because d is monic.
		for i, di := range d {
			r[k-n+i] = ((r[k-n+i]-c*di)%p + p) % p
		}
	}
	for len(r) < n {
		r = append(r, 0)
	}
	return r[:n]
}

// irreducible reports whether the monic polynomial f (low degree first)
// of degree m >= 2 has no monic divisor of degree 1..m/2 over GF(p).
func irreducible(f []int, p int) bool {
	m := len(f) - 1
	for deg := 1; deg <= m/2; deg++ {
		count := 1
		for k := 0; k < deg; k++ {
			count *= p
		}
		for low := 0; low < count; low++ {
			g := make([]int, deg+1)
			for k, x := 0, low; k < deg; k++ {
				g[k] = x % p
				x /= p
			}
			g[deg] = 1
			zero := true
			for _, c := range polyMod(f, g, p) {
				if c != 0 {
					zero = false
					break
				}
			}
			if zero {
				return false
			}
		}
	}
	return true
}
