package wire

import "testing"

func TestClassify(t *testing.T) {
	queued := &Grant{T: 5, Next: 6, Node: 2, Req: 1, Resource: "r", Queued: true}
	granted := &Grant{T: 5, Next: 6, Node: 2, Req: 1, Resource: "r"}
	released := &Released{T: 5, Next: 6, Node: 3, Req: 1, Resource: "r", Token: 4}
	sync := &Sync{T: 7, Next: 8, Turn: 1}
	for _, c := range []struct {
		name      string
		msgs      []Message
		multicast bool
		want      Class
	}{
		{"grant", []Message{granted}, true, ClassDecision},
		{"queue records alone", []Message{queued}, true, ClassDecision},
		{"hand-over to the next holder", []Message{released}, true, ClassDecision},
		{"SYNC with a grant", []Message{granted, sync}, true, ClassDecision},
		{"SYNC with a hand-over", []Message{released, sync}, true, ClassDecision},
		{"SYNC with queue records", []Message{queued, queued, sync}, true, ClassSync},
		{"bare SYNC", []Message{sync}, true, ClassSync},
		{"retransmitted decision", []Message{granted}, false, ClassRepair},
		{"request", []Message{&Request{Req: 1, Resource: "r"}}, true, ClassRequest},
		{"release", []Message{&Release{Req: 1, Resource: "r"}}, true, ClassRelease},
		{"backup's ack", []Message{&Ack{}}, true, ClassAck},
		{"ack request", []Message{&AckRequest{T: 5}}, false, ClassAck},
		{"claim", []Message{&Claim{Epoch: 2}}, true, ClassTakeover},
		{"vote", []Message{&Vote{Epoch: 2, Granted: true}}, false, ClassTakeover},
		{"takeover decision", []Message{&Takeover{T: 9, Next: 16, Epoch: 2, PrevEpoch: 1, Server: 3, Backup: 1}}, true, ClassTakeover},
		{"retransmitted takeover", []Message{&Takeover{T: 9, Next: 16, Epoch: 2, PrevEpoch: 1, Server: 3, Backup: 1}}, false, ClassRepair},
	} {
		if got := Classify(&Packet{Messages: c.msgs}, c.multicast); got != c.want {
			t.Errorf("%s: class %s, want %s", c.name, got, c.want)
		}
	}
}
