// Package protocols names the quorum-mode protocols and builds their
// machines, so that the runtime, the simulation and the command line pick
// one by name.
package protocols

import (
	"fmt"
	"slices"
	"strings"

	q "github.com/mcnode/mcnode/quorumfallback"
	"github.com/mcnode/mcnode/quorumfallback/caosinghal"
	"github.com/mcnode/mcnode/quorumfallback/central"
	"github.com/mcnode/mcnode/quorumfallback/coterie"
	"github.com/mcnode/mcnode/quorumfallback/kakugawa"
	"github.com/mcnode/mcnode/quorumfallback/maekawa"
	"github.com/mcnode/mcnode/quorumfallback/ricartagrawala"
)

// The protocol names.
const (
	Maekawa        = "maekawa"
	CaoSinghal     = "cao-singhal"
	Kakugawa       = "kakugawa"
	RicartAgrawala = "ricart-agrawala"
	Central        = "central"
)

// Names lists the protocols.
func Names() []string {
	return []string{Maekawa, CaoSinghal, Kakugawa, RicartAgrawala, Central}
}

// UsesCoterie reports whether the protocol asks a quorum (the others ask
// everybody, or one coordinator).
func UsesCoterie(name string) bool {
	return name == Maekawa || name == CaoSinghal || name == Kakugawa
}

// Setup is the shape of a quorum-mode group: protocol, coterie and size.
type Setup struct {
	Protocol string
	Coterie  string // ignored by the protocols that use none
	N        int
}

// Validate checks the names and the size, with errors that list the
// choices.
func (s Setup) Validate() error {
	if !known(s.Protocol, Names()) {
		return fmt.Errorf("protocols: unknown protocol %q (want one of %s)", s.Protocol, strings.Join(Names(), ", "))
	}
	if UsesCoterie(s.Protocol) && !known(s.Coterie, coterie.Kinds()) {
		return fmt.Errorf("protocols: unknown coterie %q (want one of %s)", s.Coterie, strings.Join(coterie.Kinds(), ", "))
	}
	if s.N < 1 {
		return fmt.Errorf("protocols: %d nodes: need at least 1", s.N)
	}
	return nil
}

// String names the setup, e.g. "maekawa/fpp N=13".
func (s Setup) String() string {
	if !UsesCoterie(s.Protocol) {
		return fmt.Sprintf("%s N=%d", s.Protocol, s.N)
	}
	return fmt.Sprintf("%s/%s N=%d", s.Protocol, s.Coterie, s.N)
}

func known(name string, names []string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// Factory builds machines for one setup; the coterie is computed once.
type Factory struct {
	Setup   Setup
	Coterie coterie.Coterie // zero for the protocols that use none
}

// NewFactory validates s and builds its coterie.
func NewFactory(s Setup) (*Factory, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	f := &Factory{Setup: s}
	if UsesCoterie(s.Protocol) {
		c, err := coterie.New(s.Coterie, s.N)
		if err != nil {
			return nil, err
		}
		f.Coterie = c
	}
	return f, nil
}

// Quorum is the set node self asks, or nil for protocols without one.
func (f *Factory) Quorum(self q.ID) []q.ID {
	if f.Coterie.Sets == nil {
		return nil
	}
	return f.Coterie.Sets[self]
}

// Asks lists the other nodes whose answers node self's requests need: its
// quorum for the protocols that use one, every node for Ricart-Agrawala,
// the coordinator for the central server. Node self can take locks while
// its links to these are up, whatever happened to the others. The links
// also keep a restarted node, which lost the state its peers rely on, from
// taking locks: its peers refuse them (package qnet). So the coordinator,
// which asks nobody but holds every lock's state, counts every node.
func (f *Factory) Asks(self q.ID) []q.ID {
	var out []q.ID
	switch {
	case f.Coterie.Sets != nil:
		out = slices.Clone(f.Coterie.Sets[self])
	case f.Setup.Protocol == Central && self != central.Coordinator:
		out = []q.ID{central.Coordinator}
	default:
		for i := range f.Setup.N {
			out = append(out, i)
		}
	}
	return slices.DeleteFunc(out, func(i q.ID) bool { return i == self })
}

// New builds node self's machine for one resource.
func (f *Factory) New(self q.ID) (q.Protocol, error) {
	n := f.Setup.N
	switch f.Setup.Protocol {
	case Maekawa:
		return maekawa.New(maekawa.Config{Self: self, N: n, Quorum: f.Quorum(self), Substitute: f.Coterie.Substitute(self)})
	case CaoSinghal:
		return caosinghal.New(caosinghal.Config{Self: self, N: n, Quorum: f.Quorum(self), Substitute: f.Coterie.Substitute(self)})
	case Kakugawa:
		return kakugawa.New(kakugawa.Config{Self: self, N: n, Quorum: f.Quorum(self)})
	case RicartAgrawala:
		return ricartagrawala.New(self, n)
	case Central:
		return central.New(self, n)
	}
	return nil, fmt.Errorf("protocols: unknown protocol %q", f.Setup.Protocol)
}

// NewAll builds every node's machine.
func (f *Factory) NewAll() ([]q.Protocol, error) {
	nodes := make([]q.Protocol, f.Setup.N)
	for i := range nodes {
		p, err := f.New(i)
		if err != nil {
			return nil, err
		}
		nodes[i] = p
	}
	return nodes, nil
}
