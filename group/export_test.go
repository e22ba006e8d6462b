package group

// ListenLocalUDP is listenLocalUDP for the external tests.
var ListenLocalUDP = listenLocalUDP

// SetMaxResourcesForTest lowers how many locks a group started (or a node
// rejoining) from now on may have in use, until the test ends. Not for
// parallel tests.
func SetMaxResourcesForTest(t interface{ Cleanup(func()) }, n int) {
	old := maxResources
	maxResources = n
	t.Cleanup(func() { maxResources = old })
}

// SetMaxSnapshotForTest lowers how large a state transfer a group started
// from now on may need (the lock table's byte budget), until the test ends.
// Not for parallel tests.
func SetMaxSnapshotForTest(t interface{ Cleanup(func()) }, n int) {
	old := maxSnapshot
	maxSnapshot = n
	t.Cleanup(func() { maxSnapshot = old })
}
