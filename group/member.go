package group

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mcnode/mcnode/internal/atomicfile"
)

// WasMember reads a Config.MemberFile: what it records (the group instance,
// the node ID and when it joined) if this host was a member of the group
// when its last node stopped without leaving, and "" if it was not (no
// file).
func WasMember(path string) (string, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("group: reading the membership record: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// recordMembership writes the MemberFile when this node joins: replaced
// whole (a temporary file renamed over it) and synced, so that a host that
// loses power right after joining still knows it was a member.
func (g *Group) recordMembership() {
	path := g.cfg.MemberFile
	if path == "" {
		return
	}
	rec := fmt.Sprintf("instance %016x node %d joined %s\n", g.node.Instance(), g.node.ID(), time.Now().UTC().Format(time.RFC3339))
	if err := atomicfile.Write(path, []byte(rec)); err != nil {
		g.log.Warn().Err(err).Str("file", path).Msg("cannot record the membership: a restart of this host while cut off from the group could found a second one")
	}
}

// forgetMembership removes the MemberFile once the group recorded the leave.
func (g *Group) forgetMembership() {
	if g.cfg.MemberFile == "" {
		return
	}
	if err := os.Remove(g.cfg.MemberFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		g.log.Warn().Err(err).Str("file", g.cfg.MemberFile).Msg("cannot remove the membership record")
	}
}
