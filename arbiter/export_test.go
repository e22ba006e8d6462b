package arbiter

// CorruptStateForTest changes one member's address in this node's replicated
// state, as a bug or a bit flip would, so that tests can watch the SYNC
// digest catch it and the state transfer repair it.
func CorruptStateForTest(n *Node) {
	n.st.members[0].addr += "-corrupt"
}
