package wire

// Upper bounds on the encoded size of a snapshot, part by part, so that a
// server can keep its state within what a state transfer may carry
// (MaxSnapshot) as it changes, without encoding it: a state that outgrew
// MaxSnapshot could no longer be sent, and no newcomer could join, nor a
// member that fell behind catch up.
//
// msgpack writes an unsigned integer in at most 9 bytes, a string shorter
// than 65,536 bytes behind a header of at most 3 (names and addresses are at
// most 1,024 bytes, Limits.Check), an array header in at most 5 bytes and a
// bool in 1; a struct is an array of its fields (toarray).
const (
	maxUintLen   = 9
	maxStrHdrLen = 3
	maxArrHdrLen = 5

	// WaiterBound bounds an encoded Waiter.
	WaiterBound = 1 + 3*maxUintLen

	// SnapshotOverhead bounds an encoded Snapshot with no members and no
	// resources: its fixed fields, its Params, the two lists' headers and
	// MaxEpochMarks epoch marks.
	SnapshotOverhead = 1 + 3*maxUintLen + // Instance, T, NextID
		1 + 5*maxUintLen + 5 + // Params (MaxMembers is a uint32)
		2*maxArrHdrLen + // Members, Resources
		3*maxUintLen + // Epoch, Backup, ViewT
		maxArrHdrLen + MaxEpochMarks*(1+2*maxUintLen) // Epochs
)

// ResourceBound bounds an encoded ResourceState whose name is nameLen bytes
// long and whose queue is empty; each waiter adds WaiterBound.
func ResourceBound(nameLen int) int {
	return 1 + maxStrHdrLen + nameLen + 3*maxUintLen + maxArrHdrLen
}

// MemberBound bounds an encoded MemberState whose address is addrLen bytes
// long and whose Decided list holds decided requests.
func MemberBound(addrLen, decided int) int {
	return 1 + 2*maxUintLen + maxStrHdrLen + addrLen + 2*maxUintLen + maxArrHdrLen + decided*maxUintLen + 2
}

// SnapshotBound bounds the encoding of s: the sum of the bounds above.
func SnapshotBound(s *Snapshot) int {
	n := SnapshotOverhead
	for _, m := range s.Members {
		n += MemberBound(len(m.Addr), len(m.Decided))
	}
	for _, r := range s.Resources {
		n += ResourceBound(len(r.Name)) + len(r.Queue)*WaiterBound
	}
	return n
}
