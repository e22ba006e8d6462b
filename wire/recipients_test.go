package wire

import (
	"testing"
)

func TestRecipientsOf(t *testing.T) {
	for _, c := range []struct {
		ids  []NodeID
		want Recipients
	}{
		{nil, Recipients{}},
		{[]NodeID{5}, Recipients{5, 5, 5}},
		{[]NodeID{5, 7}, Recipients{5, 7, 5}},
		{[]NodeID{5, 7, 5}, Recipients{5, 7, 5}},
		{[]NodeID{5, 5, 7}, Recipients{5, 7, 5}},
		{[]NodeID{5, 7, 9}, Recipients{5, 7, 9}},
		{[]NodeID{5, 7, 9, 11}, Recipients{}}, // four: for all
		{[]NodeID{5, 0}, Recipients{}},        // a member not known: for all
		{[]NodeID{1<<32 + 3}, Recipients{3, 3, 3}},
		{[]NodeID{5, 1 << 32}, Recipients{}}, // a name of 0 would read as "every member"
		{[]NodeID{5, 1<<32 + 5, 7}, Recipients{5, 7, 5}},
	} {
		if got := RecipientsOf(c.ids...); got != c.want {
			t.Errorf("RecipientsOf(%v) = %v, want %v", c.ids, got, c.want)
		}
	}
	r := RecipientsOf(5, 7)
	for id, want := range map[NodeID]bool{5: true, 7: true, 6: false, 0: false, 1<<32 + 5: true} {
		if r.Includes(id) != want {
			t.Errorf("%v includes %d: %v, want %v", r, id, !want, want)
		}
	}
	for _, all := range []Recipients{{}, {0, 5, 7}} {
		if !all.All() || !all.Includes(6) || !all.Includes(0) {
			t.Errorf("%v is not every member", all)
		}
	}
}

// A datagram addressed to members 2 and 7 is addressed elsewhere for every
// other member, sealed or not; one for all, one of another version, one
// too short or not mcnode's, never.
func TestAddressedElsewhere(t *testing.T) {
	c := newTestCodec(t)
	pack := func(h Header) []byte {
		d, err := c.Pack(h, []Message{&Request{Req: 1, Resource: "r"}})
		if err != nil {
			t.Fatal(err)
		}
		return d[0]
	}
	to27 := pack(testHeader)
	h := testHeader
	h.For = Recipients{}
	forAll := pack(h)
	sealed := append([]byte(nil), to27...)
	SetSealed(sealed, true)
	other := append([]byte(nil), to27...)
	other[2] = Version + 1
	for _, c := range []struct {
		name string
		data []byte
		id   NodeID
		want bool
	}{
		{"named", to27, 2, false},
		{"named second", to27, 7, false},
		{"not named", to27, 3, true},
		{"sealed, not named", sealed, 3, true},
		{"sealed, named", sealed, 7, false},
		{"for all", forAll, 3, false},
		{"no filter", to27, 0, false},
		{"another version", other, 3, false},
		{"short", to27[:HeaderLen-1], 3, false},
		{"not mcnode's", append([]byte("xx"), to27[2:]...), 3, false},
	} {
		if got := AddressedElsewhere(c.data, c.id); got != c.want {
			t.Errorf("%s: AddressedElsewhere(id %d) = %v, want %v", c.name, c.id, got, c.want)
		}
	}
}
