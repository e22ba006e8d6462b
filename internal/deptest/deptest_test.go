// Package deptest keeps the protocol packages pure: the state machines and
// their wire format must not reach the network, the operating system, the
// wall clock or a lock, so that the same code runs deterministically in the
// simulation and over real sockets.
package deptest

import (
	"go/build"
	"strings"
	"testing"
)

// pure lists the packages that must stay free of I/O, time and locking.
var pure = []string{
	"github.com/mcnode/mcnode/arbiter",
	"github.com/mcnode/mcnode/clock",
	"github.com/mcnode/mcnode/wire",
	"github.com/mcnode/mcnode/quorumfallback",
	"github.com/mcnode/mcnode/quorumfallback/coterie",
	"github.com/mcnode/mcnode/quorumfallback/maekawa",
	"github.com/mcnode/mcnode/quorumfallback/caosinghal",
	"github.com/mcnode/mcnode/quorumfallback/kakugawa",
	"github.com/mcnode/mcnode/quorumfallback/ricartagrawala",
	"github.com/mcnode/mcnode/quorumfallback/central",
	"github.com/mcnode/mcnode/quorumfallback/protocols",
	"github.com/mcnode/mcnode/quorumfallback/sim",
}

// banned reports why an import is not allowed in a pure package, or "".
// Only direct imports are checked: fmt itself imports os and sync, and using
// fmt does not make a package do I/O.
func banned(path string) string {
	for _, prefix := range []string{"net", "os", "sync", "time", "syscall", "io/fs", "golang.org/x/net", "golang.org/x/sys"} {
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			return "I/O, clocks and locks belong to the runtime"
		}
	}
	for _, prefix := range []string{"github.com/mcnode/mcnode/group", "github.com/mcnode/mcnode/cmd", "github.com/mcnode/mcnode/internal/simtest", "github.com/mcnode/mcnode/quorumfallback/qnet", "github.com/mcnode/mcnode/quorumfallback/node"} {
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			return "the protocol must not depend on a transport or the runtime"
		}
	}
	return ""
}

func TestProtocolPackagesArePure(t *testing.T) {
	for _, pkg := range pure {
		p, err := build.Import(pkg, ".", 0)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		if len(p.GoFiles) == 0 {
			t.Fatalf("%s: no Go files found; the test would check nothing", pkg)
		}
		for _, imp := range p.Imports {
			if why := banned(imp); why != "" {
				t.Errorf("%s imports %s: %s", pkg, imp, why)
			}
		}
	}
}

// The check itself must be able to fail.
func TestBannedCatchesTheForbidden(t *testing.T) {
	for _, imp := range []string{"net", "net/netip", "os", "sync", "sync/atomic", "time", "golang.org/x/net/ipv4", "github.com/mcnode/mcnode/group/memnet"} {
		if banned(imp) == "" {
			t.Errorf("%s is not banned", imp)
		}
	}
	for _, imp := range []string{"fmt", "errors", "slices", "hash/fnv", "github.com/mcnode/mcnode/wire", "github.com/hashicorp/go-msgpack/v2/codec"} {
		if banned(imp) != "" {
			t.Errorf("%s is banned", imp)
		}
	}
}

// TestGameUsesOnlyThePublicAPI: the game doubles as the example of
// embedding mcnode, so its code imports mcnode's public packages only, never
// internal ones (directly; the runtime's own internals are its business).
// Its tests may use the internal harness.
func TestGameUsesOnlyThePublicAPI(t *testing.T) {
	p, err := build.Import("github.com/mcnode/mcnode/examples/game", ".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.GoFiles) == 0 {
		t.Fatal("no Go files found in examples/game")
	}
	uses := false
	for _, imp := range p.Imports {
		if strings.Contains(imp, "/internal/") || strings.HasSuffix(imp, "/internal") {
			t.Errorf("examples/game imports %s", imp)
		}
		uses = uses || imp == "github.com/mcnode/mcnode"
	}
	if !uses {
		t.Error("examples/game does not import package mcnode: the check checks nothing")
	}
}
