package arbiter

import "github.com/mcnode/mcnode/wire"

// CorruptStateForTest changes one member's address in this node's replicated
// state, as a bug or a bit flip would, so that tests can watch the SYNC
// digest catch it and the state transfer repair it.
func CorruptStateForTest(n *Node) {
	const corrupt = "-corrupt"
	n.st.members[0].addr += corrupt
	n.st.size += len(corrupt) // the address is what the test corrupts, not the size kept for it
}

// DecidedForTest returns how many requests of member id this node's state
// lists as decided above the member's floor.
func DecidedForTest(n *Node, id wire.NodeID) int {
	if m := n.st.member(id); m != nil {
		return len(m.decided)
	}
	return -1
}

// SnapshotDigestForTest is the digest a state transfer of snap carries: what
// a sender computes over the state it sends.
func SnapshotDigestForTest(snap *wire.Snapshot) uint64 {
	return stateFromSnapshot(snap).digest()
}

// BackupTakenUpForTest exposes backupTakenUp.
func BackupTakenUpForTest(n *Node) bool { return n.backupTakenUp() }
