// Package clock holds the logical time of mcnode: the group timestamp and the
// rotating-arbiter turn schedule of Pearlin's thesis (Boston College, 2003).
//
// # The turn schedule
//
// The group timestamp T is advanced only by the server. The server for T is
// fixed by the view (the members in logical-ID order) and the turn length L:
//
//	server(T) = view[(T / L) mod len(view)]
//
// so member i of n serves the timestamps i*L .. i*L+L-1, then (i+n)*L ..
// (i+n)*L+L-1, and so on (the paper's figures B and C compute the same start
// and stop times). On a view change every node builds a new Schedule from the
// new view; because IDs are assigned in join order and never reused, every
// node that has applied the same decisions computes the same server for the
// same T.
//
// The package has no I/O and no wall clock; it is pure arithmetic.
package clock
