package bench

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mcnode/mcnode/quorumfallback/coterie"
	"github.com/mcnode/mcnode/quorumfallback/protocols"
)

// Setup is one protocol to measure: the rotating arbiter (Coterie empty),
// or a quorum protocol with its coterie (empty for protocols that use none).
type Setup struct {
	Protocol, Coterie string
}

// String names the setup as Row.Setup does.
func (s Setup) String() string { return Row{Protocol: s.Protocol, Coterie: s.Coterie}.Setup() }

// Multicast reports whether the setup is the multicast mode.
func (s Setup) Multicast() bool { return s.Protocol == RotatingArbiter || s.Keyed() }

// Keyed reports whether the setup seals its datagrams with a group key.
func (s Setup) Keyed() bool { return s.Protocol == RotatingArbiterKeyed }

// quorum returns the quorum-mode setup for n nodes.
func (s Setup) quorum(n int) protocols.Setup {
	return protocols.Setup{Protocol: s.Protocol, Coterie: s.Coterie, N: n}
}

// ProtocolNames lists every protocol the bench knows: the rotating arbiter
// first, then the quorum protocols.
func ProtocolNames() []string {
	return append([]string{RotatingArbiter, RotatingArbiterKeyed}, protocols.Names()...)
}

// Setups expands protocol and coterie names into setups, each coterie
// protocol once per coterie, in the order given. Empty lists mean all.
func Setups(protos, coteries []string) ([]Setup, error) {
	if len(protos) == 0 {
		protos = ProtocolNames()
	}
	if len(coteries) == 0 {
		coteries = coterie.Kinds()
	}
	for _, c := range coteries {
		if !slices.Contains(coterie.Kinds(), c) {
			return nil, fmt.Errorf("unknown coterie %q: want one of %s", c, strings.Join(coterie.Kinds(), ", "))
		}
	}
	var out []Setup
	for _, p := range protos {
		switch {
		case p == RotatingArbiter || p == RotatingArbiterKeyed || !protocols.UsesCoterie(p) && slices.Contains(protocols.Names(), p):
			out = append(out, Setup{Protocol: p})
		case slices.Contains(protocols.Names(), p):
			for _, c := range coteries {
				out = append(out, Setup{Protocol: p, Coterie: c})
			}
		default:
			return nil, fmt.Errorf("unknown protocol %q: want one of %s", p, strings.Join(ProtocolNames(), ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no setup to measure")
	}
	return out, nil
}
