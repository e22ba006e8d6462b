package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcnode/mcnode/internal/netns"
)

// A group whose daemons share a key file (made by mcnode keygen) grants
// locks to `mcnode lock` on every host that has the file; a host without
// it finds no group it can read (its datagrams are dropped, and counted by
// the members as unsealed); a key file others can read is refused.
func TestE2EGroupKey(t *testing.T) {
	c := &cluster{t: t, lan: netns.NewLAN(t, 3), dir: t.TempDir(), daemons: make([]*exec.Cmd, 3)}
	keyfile := filepath.Join(c.dir, "group.key")
	if out, err := c.mcnode(0, "keygen", keyfile).CombinedOutput(); err != nil {
		t.Fatalf("mcnode keygen: %v: %s", err, out)
	}
	c.env = func(i int) []string {
		if i == 2 {
			return nil // the host without the key
		}
		return []string{"MCNODE_KEYFILE=" + keyfile}
	}
	c.startDaemon(0)
	c.waitMembers(0, 1)
	c.startDaemon(1)
	c.waitMembers(0, 2)
	c.waitMembers(1, 2)
	if out, err := c.mcnode(1, "lock", "k", "--", "true").CombinedOutput(); err != nil {
		t.Fatalf("mcnode lock with the key: %v: %s", err, out)
	}
	out, err := c.mcnode(2, "lock", "k", "--", "true").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitNotAcquired {
		t.Fatalf("mcnode lock without the key: %v: %s", err, out)
	}
	v := c.waitStatus(0, "the keyless host's datagrams counted as unsealed", func(v *statusView) bool { return v.Drops["unsealed"] > 0 })
	if len(v.Members) != 2 {
		t.Fatalf("members %+v", v.Members)
	}
	if err := os.Chmod(keyfile, 0o644); err != nil {
		t.Fatal(err)
	}
	// No daemon to ask on host 2: status joins the group itself, with the key.
	cmd := c.mcnode(2, "status")
	cmd.Env = append(cmd.Env, "MCNODE_KEYFILE="+keyfile)
	out, err = cmd.CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "chmod 600") {
		t.Fatalf("a key file others can read: %v: %s", err, out)
	}
}
