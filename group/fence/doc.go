// Package fence lets a resource guarded by an mcnode lock refuse a stale
// holder, by keeping the highest fencing token it has seen in a file.
//
// # Fencing tokens
//
// A lock with leases cannot stop a holder that is paused (a long GC pause,
// SIGSTOP, a VM migrated or swapped out, a slow disk) for longer than its
// lease: the group hands the lock on, and the old holder, when it wakes,
// still believes it holds the lock and writes. Nothing the lock service does
// can reach into the paused process, so the resource must protect itself.
// Kleppmann ("How to do distributed locking", 2016) describes the remedy: the
// lock service hands out a number that increases with every grant, the
// holder sends it with every write, and the resource refuses a write whose
// number is lower than one it has already accepted. Chubby's sequencers
// (Burrows, "The Chubby lock service for loosely-coupled distributed
// systems", 2006) are the same idea: an opaque string naming the lock and
// its generation, which a server checks before acting on a request.
//
// mcnode's token is the group timestamp of the grant, strictly increasing per
// lock ((*group.Lease).Token in Go, $MCNODE_TOKEN under `mcnode lock`).
//
// # Why at the resource
//
// Only the resource sees the writes in the order they land, so only it can
// tell that a write comes from a holder that has been superseded. Check
// records the highest token seen in a file and refuses a lower one (an equal
// token is the same holder writing again, and is accepted). A flock on the
// file serializes concurrent checks, from goroutines of one process or from
// other processes. Keep the file on a local file system of the resource's
// host: over a network file system, flock is only as good as its locking.
//
// # Only as good as the resource's atomicity
//
// The check protects a write only if nothing can come between the check and
// the write. A separate process that checks and then writes (`mcnode fence
// check ... && write`) is not atomic: a holder can pass the check, pause, and
// write after a newer holder has passed it and written too. It narrows the window to the gap between
// check and write; it does not close it. To close it, call Check where the
// write happens and under the same lock that serializes the resource's
// writes (the server's own mutex), so that no other write can slip in
// between. (A database would rather keep the token in a row that each write
// updates in the same transaction.)
//
// # Usage
//
// In a service that applies writes one at a time, each carrying the token of
// the holder that sent it (its lease.Token()):
//
//	s.mu.Lock() // the lock that serializes writes to the resource
//	defer s.mu.Unlock()
//	if err := fence.Check("/srv/db/fence", req.Token); err != nil {
//		return err // errors.Is(err, fence.ErrStale): a newer holder has written
//	}
//	return s.apply(req)
//
// The file holds one fixed-width decimal record; see Check for why it is
// written in place. Highest reads it.
package fence
