package protocols

import (
	"errors"
	"testing"

	q "github.com/mcnode/mcnode/quorumfallback"
)

// Every machine refuses calls out of order and messages that cannot be for
// it, with the documented errors, and changes nothing.
func TestMachineAPIErrors(t *testing.T) {
	for _, p := range Names() {
		t.Run(p, func(t *testing.T) {
			f, err := NewFactory(Setup{Protocol: p, Coterie: "grid", N: 4})
			if err != nil {
				t.Fatal(err)
			}
			m, err := f.New(1)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Release(); !errors.Is(err, q.ErrNotHeld) {
				t.Errorf("Release while idle: %v", err)
			}
			for _, bad := range []q.Message{
				{Kind: 0, From: 0, To: 1, Site: q.None},
				{Kind: q.Transfer + 1, From: 0, To: 1, Site: q.None},
				{Kind: q.Request, From: 0, To: 2, Site: q.None},                                    // not for us
				{Kind: q.Request, From: 1, To: 1, Site: q.None},                                    // from ourselves
				{Kind: q.Request, From: 7, To: 1, Site: q.None},                                    // no such node
				{Kind: q.Grant, From: 0, To: 1, Arbiter: 9, Site: q.None},                          // no such arbiter
				{Kind: q.Release, From: 0, To: 1, Site: 4},                                         // no such site
				{Kind: q.Request, From: 0, To: 1, Arbiter: 1, Seq: q.MaxCounter + 1, Site: q.None}, // would wrap the clock
				{Kind: q.Grant, From: 0, To: 1, Arbiter: 0, Token: q.MaxCounter + 1, Site: q.None}, // would wrap the tokens
			} {
				if err := m.Step(bad); !errors.Is(err, q.ErrBadMessage) {
					t.Errorf("Step(%v): %v, want ErrBadMessage", bad, err)
				}
			}
			if rd := m.Ready(); len(rd.Messages) != 0 || rd.Entered || m.State() != q.Idle {
				t.Fatalf("bad messages changed the machine: %+v, %v", rd, m.State())
			}
			if err := m.Request(); err != nil {
				t.Fatal(err)
			}
			if err := m.Request(); !errors.Is(err, q.ErrBusy) {
				t.Errorf("second Request: %v", err)
			}
			if m.State() != q.Waiting {
				t.Errorf("state %v after Request", m.State())
			}
		})
	}
}

// FuzzMachineStep feeds every machine arbitrary messages with in-range
// fields (what a confused or hostile peer could send over a link), of
// every kind, between requests, releases and, for the machines that
// tolerate failures, any node put down or up: no machine may panic or
// send a message out of range, and each either rejects a message or takes
// it.
func FuzzMachineStep(f *testing.F) {
	f.Add([]byte{1, 0, 1, 0, 1, 0, 0, 0})
	f.Add([]byte{2, 3, 1, 3, 1, 0, 1, 1, 3, 1, 0, 1, 5, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		const n = 5
		// The tree coterie has substitute quorums: Down takes requests there.
		coterie := []string{"fpp", "tree"}[len(data)%2]
		for _, p := range Names() {
			fac, err := NewFactory(Setup{Protocol: p, Coterie: coterie, N: n})
			if err != nil {
				t.Fatal(err)
			}
			m, err := fac.New(1)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+7 <= len(data); i += 7 {
				b := data[i : i+7]
				switch op := b[0] % 18; op {
				case 14:
					_ = m.Request()
				case 15:
					_ = m.Release()
				case 16, 17:
					if ft, ok := m.(q.FaultTolerant); ok && op == 16 {
						ft.Down(int(b[1] % n))
					} else if ok {
						ft.Up(int(b[1] % n))
					}
				default:
					msg := q.Message{Kind: q.Kind(op), From: int(b[1] % n), To: 1, Arbiter: int(b[2] % n),
						Seq: uint64(b[3] % 4), Site: int(b[4]%(n+1)) - 1, SiteSeq: uint64(b[5] % 4), WithTransfer: b[6]&1 == 1, Token: uint64(b[6] >> 1)}
					_ = m.Step(msg)
				}
				for _, out := range m.Ready().Messages {
					if out.From != 1 || out.To == 1 || out.To < 0 || out.To >= n {
						t.Fatalf("%s sent %v", p, out)
					}
				}
			}
		}
	})
}
