package quorumfallback

import "slices"

// LiveQuorum is the quorum a request asks while the nodes marked in down
// have failed: quorum itself if none of its members is down, else the
// substitute that substitute builds from the live nodes, sorted. It
// reports false if some member is down and there is no substitute (nil, or
// none among the live nodes): the request must wait for a node to come
// back.
func LiveQuorum(quorum []ID, down []bool, substitute func(alive func(ID) bool) ([]ID, bool)) ([]ID, bool) {
	if !slices.ContainsFunc(quorum, func(j ID) bool { return down[j] }) {
		return quorum, true
	}
	if substitute == nil {
		return nil, false
	}
	sub, ok := substitute(func(j ID) bool { return !down[j] })
	if !ok {
		return nil, false
	}
	return slices.Sorted(slices.Values(sub)), true
}

// GiveBack sends a release of request seq, with the holder's token, to
// every arbiter of quorum that is not down: it gives back a permission
// got and withdraws a request still queued (Maekawa's and Cao and
// Singhal's machines, when a request gives up its quorum or leaves).
func (o *Outbox) GiveBack(quorum []ID, down []bool, seq, token uint64) {
	for _, j := range quorum {
		if !down[j] {
			o.Send(Message{Kind: Release, To: j, Arbiter: j, Seq: seq, Site: None, Token: token})
		}
	}
}
