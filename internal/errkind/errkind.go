// Package errkind gives the errors of both runtimes (group, the multicast
// mode, and quorumfallback/node) a kind that the mode-independent API in
// package mcnode can test for with errors.Is, while each runtime keeps its
// own sentinel and message.
package errkind

import "errors"

// The kinds, re-exported by package mcnode.
var (
	// Closed: the node has been closed or has left.
	Closed = errors.New("mcnode: node closed")
	// LeaseLost: a lease ended without Release.
	LeaseLost = errors.New("mcnode: lease lost")
	// Locked: TryAcquire found the lock held or waited for.
	Locked = errors.New("mcnode: the lock is held or waited for")
	// TooMany: the runtime's lock table is full.
	TooMany = errors.New("mcnode: the lock table is full")
)

// New returns a sentinel error that says msg and matches kind under
// errors.Is. It does not unwrap to kind, so that its message is the whole of
// what it says.
func New(msg string, kind error) error { return &kinded{msg: msg, kind: kind} }

type kinded struct {
	msg  string
	kind error
}

func (e *kinded) Error() string { return e.msg }

// Is reports whether target is this error's kind.
func (e *kinded) Is(target error) bool { return target == e.kind }
