package arbiter

import (
	"math"
	"testing"

	"github.com/mcnode/mcnode/wire"
)

// The largest SYNC endTurn can make fits one datagram: maxListed unheard
// members, every one of them a lapsed observer it removes, with IDs, ticks
// and timestamps at their widest encoding; and a Partial one whose Renew
// takes half the room, or Quiet the rest of it. Were it to overflow, the server could not end its
// turn while that many observers were dead.
func TestLargestSyncFitsADatagram(t *testing.T) {
	for _, maxDatagram := range []int{1200, wire.DefaultLimits().MaxDatagram, 9000, wire.MaxUDPPayload} {
		l := wire.DefaultLimits()
		l.MaxDatagram = maxDatagram
		n := &Node{cfg: Config{Limits: l}}
		k := min(n.maxListed(), l.MaxMembers) // no more members than that to list
		codec, err := wire.NewCodec(l)
		if err != nil {
			t.Fatal(err)
		}
		wide := func(i int) wire.NodeID { return wire.NodeID(math.MaxUint64 - uint64(i)) }
		full := &wire.Sync{T: math.MaxUint64 - 1, Next: math.MaxUint64, Epoch: math.MaxUint64, Turn: math.MaxUint64,
			Backup: wide(2 * k), Promote: wide(2*k + 1), Digest: math.MaxUint64}
		partial := *full
		partial.Partial = true
		quiet := *full // the room Unheard leaves goes to Quiet
		for i := 0; i < k; i++ {
			full.Unheard = append(full.Unheard, wire.Silence{ID: wide(i), Ticks: math.MaxUint64})
			full.RemoveObservers = append(full.RemoveObservers, wide(i))
			if i < k/2 {
				partial.Renew = append(partial.Renew, wide(k+i))
				quiet.Quiet = append(quiet.Quiet, wire.Silence{ID: wide(k + i), Ticks: math.MaxUint64})
			} else {
				partial.Unheard = append(partial.Unheard, wire.Silence{ID: wide(i), Ticks: math.MaxUint64})
				partial.RemoveObservers = append(partial.RemoveObservers, wide(i))
				quiet.Unheard = append(quiet.Unheard, wire.Silence{ID: wide(i), Ticks: math.MaxUint64})
				quiet.RemoveObservers = append(quiet.RemoveObservers, wide(i))
			}
		}
		for name, sync := range map[string]*wire.Sync{"full": full, "partial": &partial, "quiet": &quiet} {
			h := wire.Header{Group: wire.GroupID("g"), From: math.MaxUint64, Inc: math.MaxUint64, T: math.MaxUint64, Epoch: math.MaxUint64, LogEpoch: math.MaxUint64, Instance: math.MaxUint64}
			out, err := codec.Pack(h, []wire.Message{sync})
			if err != nil || len(out) != 1 {
				t.Errorf("MaxDatagram %d, %s SYNC of %d listed: %d datagrams, %v", maxDatagram, name, k, len(out), err)
			}
		}
	}
}
