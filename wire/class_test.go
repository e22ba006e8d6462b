package wire

import "testing"

func TestClassify(t *testing.T) {
	queued := &Grant{T: 5, Next: 6, Node: 2, Req: 1, Resource: "r", Queued: true}
	granted := &Grant{T: 5, Next: 6, Node: 2, Req: 1, Resource: "r"}
	released := &Released{T: 5, Next: 6, Node: 3, Req: 1, Resource: "r", Token: 4}
	sync := &Sync{T: 7, Next: 8, Turn: 1}
	ping := &Ping{Turn: 1, Probe: 3}
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
		{"bare ping", []Message{ping}, true, ClassPing},
		{"ping carrying held-back decisions", []Message{released, queued, ping}, true, ClassPing},
		{"ping with a grant", []Message{granted, ping}, true, ClassDecision},
		{"ping with a SYNC", []Message{released, sync, ping}, true, ClassDecision},
		{"ping with a takeover", []Message{&Takeover{T: 9, Next: 16, Epoch: 2, PrevEpoch: 1, Server: 3, Backup: 1}, ping}, true, ClassTakeover},
		{"ping with an admission", []Message{&OkToJoin{T: 9, Next: 10, Inc: 7, ID: 4, Addr: "10.0.0.4:1"}, ping}, true, ClassJoin},
		{"update riding a ping", []Message{&Update{Topic: "t"}, ping}, true, ClassPing},
	} {
		if got := Classify(&Packet{Messages: c.msgs}, c.multicast); got != c.want {
			t.Errorf("%s: class %s, want %s", c.name, got, c.want)
		}
	}
}

// Index is each class's position in Classes, and arrays of NumClasses
// hold them all.
func TestClassIndex(t *testing.T) {
	if len(Classes) != NumClasses {
		t.Fatalf("%d classes, NumClasses %d", len(Classes), NumClasses)
	}
	for i, c := range Classes {
		if c.Index() != i {
			t.Errorf("%s.Index() = %d, want %d", c, c.Index(), i)
		}
	}
	if i := Class("nonesuch").Index(); i != -1 {
		t.Errorf("an unknown class's Index is %d", i)
	}
}
