package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcnode/mcnode/internal/netns"
	"github.com/mcnode/mcnode/seal"
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
	if !errors.As(err, &ee) || ee.ExitCode() != exitNoGroup {
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

	// A daemon with a stale key (one the group does not hold) hears the
	// group's datagrams and can open none: its status says it is not a
	// member yet, what it waits for, and that it drops them for their key,
	// with exit status 1. It never founds a group of its own: one that
	// would grant the locks the group grants.
	stale := filepath.Join(c.dir, "stale.key")
	if out, err := c.mcnode(0, "keygen", stale).CombinedOutput(); err != nil {
		t.Fatalf("mcnode keygen: %v: %s", err, out)
	}
	daemon := c.mcnode(2, "run")
	daemon.Env = append(daemon.Env, "MCNODE_KEYFILE="+stale)
	d := c.background(daemon)
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err = c.mcnode(2, "status").CombinedOutput()
		if errors.As(err, &ee) && ee.ExitCode() == 1 && strings.Contains(string(out), "unknown-key: the group's datagrams come sealed with a key this node does not hold") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mcnode status of a daemon with a stale key did not name the key drops within 20s: %v: %s\ndaemon: %s", err, out, d.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(string(out), "not a member yet") || !strings.Contains(string(out), "the group's datagrams arrive, and this node cannot read them") ||
		!strings.Contains(string(out), "mcnode: daemon: the daemon is not a member of the group yet") {
		t.Errorf("mcnode status of a daemon with a stale key: %s", out)
	}
	time.Sleep(5 * 300 * time.Millisecond) // past its join timeout, MCNODE_JOIN_TIMEOUT
	out, err = c.mcnode(2, "status", "--json").Output()
	var joining statusView
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || json.Unmarshal(out, &joining) != nil || joining.Joining == "" || joining.Drops["unknown-key"] == 0 || len(joining.Members) != 0 {
		t.Errorf("mcnode status --json of a daemon with a stale key, past its join timeout: %v: %s\ndaemon: %s", err, out, d.out)
	}
	_ = d.cmd.Process.Kill()
	<-d.done // its output is complete, and read by this goroutine alone
	if strings.Contains(d.out.String(), "founded the group") {
		t.Errorf("the daemon with a stale key founded a group of its own: %s", d.out)
	}
}

// A group's key is rotated by mcnode keys on one host, in the three steps
// of its help, while lock loops on every host take a shared lock: each step
// reaches every member, no critical sections overlap and tokens increase, a
// step that would cut a member off is refused and changes nothing, each
// daemon's key file ends up holding the new key alone, and a daemon
// restarted from it rejoins.
func TestE2EKeyRotation(t *testing.T) { keyRotation(t, false) }

// The same in quorum mode (Maekawa, majority coterie): the links present
// and accept the keys as they change; a quorum-mode node is not restarted
// (see TestSetKeysRotates for links made after the rotation).
func TestE2EQuorumKeyRotation(t *testing.T) { keyRotation(t, true) }

func keyRotation(t *testing.T, quorum bool) {
	const hosts = 3 // a majority stays up while one restarts
	c := &cluster{t: t, lan: netns.NewLAN(t, hosts), dir: t.TempDir(), daemons: make([]*exec.Cmd, hosts)}
	keyfile := func(i int) string { return filepath.Join(c.dir, fmt.Sprintf("host%d.key", i)) }
	old := filepath.Join(c.dir, "old.key")
	keyOnEveryHost(c, hosts, old, keyfile)
	c.env = func(i int) []string { return []string{"MCNODE_KEYFILE=" + keyfile(i)} }
	if quorum {
		c.env = keyedQuorumEnv(c, keyfile)
		for i := range hosts {
			c.startDaemon(i)
		}
		for i := range hosts {
			c.waitStatus(i, "its control socket", func(*statusView) bool { return true })
		}
	} else {
		c.startDaemon(0)
		c.waitMembers(0, 1)
		for i := 1; i < hosts; i++ {
			c.startDaemon(i)
		}
		for i := 0; i < hosts; i++ {
			c.waitMembers(i, hosts)
		}
	}
	next := filepath.Join(c.dir, "next.key")
	if out, err := c.mcnode(0, "keygen", next).CombinedOutput(); err != nil {
		t.Fatalf("mcnode keygen: %v: %s", err, out)
	}
	ids := func(path string) []string {
		keys, err := seal.LoadKeyFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, k := range keys {
			out = append(out, seal.FormatID(k.ID()))
		}
		return out
	}
	oldID, nextID := ids(old)[0], ids(next)[0]
	loops := startLockLoops(c, []int{0, 1, 2}, 2)
	waitLines(t, loops, 3)
	keys := func(i int, args ...string) (string, error) {
		out, err := c.mcnode(i, append([]string{"keys"}, args...)...).CombinedOutput()
		return string(out), err
	}
	// Out of order, each step is refused on every member's behalf.
	if out, err := keys(1, "use", nextID); err == nil || !strings.Contains(out, "this node lacks key "+nextID) {
		t.Fatalf("keys use of a key no member holds: %v: %s", err, out)
	}
	if out, err := keys(0, "install", "--local", next); err != nil {
		t.Fatalf("keys install --local: %v: %s", err, out)
	}
	if out, err := keys(0, "use", nextID); err == nil || !strings.Contains(out, "lacks key "+nextID) {
		t.Fatalf("keys use of a key only this host holds: %v: %s", err, out)
	}
	if got := ids(keyfile(0)); len(got) != 2 || got[0] != oldID {
		t.Fatalf("a refused use changed host 0's key file: %v", got)
	}
	lines := 3
	// The use step names the key in capitals, as hex may be written.
	for _, step := range [][]string{{"install", next}, {"use", strings.ToUpper(nextID)}, {"remove", oldID}} {
		out, err := keys(2, step...)
		if err != nil {
			t.Fatalf("mcnode keys %v on host 2: %v: %s", step, err, out)
		}
		if got := strings.Count(out, "(seals)"); got != hosts {
			t.Fatalf("mcnode keys %v listed %d members' keys, want %d: %s", step, got, hosts, out)
		}
		if step[0] == "use" {
			if out, err := keys(0, "remove", nextID); err == nil || !strings.Contains(out, "still seals with key "+nextID) {
				t.Fatalf("the key every member seals with was removed: %v: %s", err, out)
			}
		}
		lines += 3
		waitLines(t, loops, lines) // locks flow after each step
	}
	loops.halt(t)
	for _, e := range loops.errs {
		t.Errorf("lock loop: %s", e)
	}
	t.Logf("%d critical sections during the rotation, none overlapping", len(loops.sections(t)))
	for i := 0; i < hosts; i++ {
		out, err := keys(i, "list", "--local")
		if err != nil || strings.TrimSpace(out) != nextID+"  (seals)" {
			t.Fatalf("host %d: mcnode keys list --local after the rotation: %v: %q", i, err, out)
		}
		if got := ids(keyfile(i)); len(got) != 1 || got[0] != nextID {
			t.Fatalf("host %d's key file holds %v, want %s alone", i, got, nextID)
		}
	}
	if quorum {
		return // a restarted quorum-mode node is refused (until it rejoins as a new incarnation)
	}
	_ = c.daemons[1].Process.Kill()
	_ = c.daemons[1].Wait()
	c.startDaemon(1)
	c.waitStatus(1, "the restarted daemon rejoined with the rewritten key file", func(v *statusView) bool { return v.Self != 0 })
	if out, err := c.mcnode(1, "lock", "--timeout", "5s", "k", "--", "true").CombinedOutput(); err != nil {
		t.Fatalf("mcnode lock on the restarted daemon: %v: %s", err, out)
	}
	if out, err := c.mcnode(1, "keys", "remove", nextID).CombinedOutput(); err == nil {
		t.Fatalf("the key that seals was removed: %s", out)
	}
}

// A key file the daemon cannot rewrite (docs/mcnode.service hands it over
// read-only) does not stop a key change: the running node and every other
// member make it, and mcnode keys warns, for that node, that a restart
// undoes it. It used to fail there, before asking the other members.
func TestE2EKeyFileReadOnly(t *testing.T) {
	const hosts = 2
	c := &cluster{t: t, lan: netns.NewLAN(t, hosts), dir: t.TempDir(), daemons: make([]*exec.Cmd, hosts)}
	keyfile := func(i int) string { return filepath.Join(c.dir, fmt.Sprintf("keys%d", i), "group.key") }
	keyOnEveryHost(c, hosts, filepath.Join(c.dir, "first.key"), keyfile)
	c.env = func(i int) []string { return []string{"MCNODE_KEYFILE=" + keyfile(i)} }
	c.startDaemon(0)
	c.waitMembers(0, 1)
	// Host 1's daemon sees its key directory read-only, in the mount
	// namespace `ip netns exec` gives it (nothing outside it changes).
	daemon := underShell(c.mcnode(1, "run"), `mount --bind "$KEYDIR" "$KEYDIR" && mount -o remount,bind,ro "$KEYDIR"`)
	daemon.Env = append(daemon.Env, "KEYDIR="+filepath.Dir(keyfile(1)))
	d := c.background(daemon)
	c.daemons[1] = daemon
	c.waitMembers(0, 2)
	c.waitMembers(1, 2)

	next := filepath.Join(c.dir, "next.key")
	if out, err := c.mcnode(0, "keygen", next).CombinedOutput(); err != nil {
		t.Fatalf("mcnode keygen: %v: %s", err, out)
	}
	for _, from := range []int{0, 1} { // asked on the read-only host, and of it
		out, err := c.mcnode(from, "keys", "install", next).CombinedOutput()
		if err != nil {
			t.Fatalf("mcnode keys install on host %d: %v: %s\ndaemon 1: %s", from, err, out, d.out)
		}
		if got := strings.Count(string(out), "(seals)"); got != hosts {
			t.Errorf("mcnode keys install on host %d listed %d members' keys, want %d: %s", from, got, hosts, out)
		}
		if n := strings.Count(string(out), "mcnode: warning: node 2 ("+c.lan.Hosts[1].IP); n != 1 && from == 0 {
			t.Errorf("mcnode keys install on host 0 did not name node 2 (host 1) once in a warning: %s", out)
		}
		if n := strings.Count(string(out), "the running node has the change, but its key file "+keyfile(1)+" was not rewritten"); n != 1 {
			t.Errorf("mcnode keys install on host %d warned %d times of host 1's key file, want once: %s", from, n, out)
		}
		if strings.Contains(string(out), keyfile(0)) {
			t.Errorf("host 0's key file, which was rewritten, is warned of: %s", out)
		}
	}
	for i := range hosts {
		out, err := c.mcnode(i, "keys", "list", "--local").CombinedOutput()
		if err != nil || strings.Count(string(out), "\n") != 2 {
			t.Errorf("host %d's keys after the install: %v: %s", i, err, out)
		}
	}
	if keys, err := seal.LoadKeyFile(keyfile(1)); err != nil || len(keys) != 1 {
		t.Errorf("host 1's read-only key file: %d keys, %v; want the first alone", len(keys), err)
	}
	if keys, err := seal.LoadKeyFile(keyfile(0)); err != nil || len(keys) != 2 {
		t.Errorf("host 0's key file: %d keys, %v; want both", len(keys), err)
	}
}

// keyOnEveryHost makes a key file at path with mcnode keygen and copies it
// to keyfile(i) for each of the hosts (making its directory), as an
// operator copies a group's key to every member.
// keyedQuorumEnv is the environment of a quorum-mode daemon (Maekawa,
// majority coterie) on each of the cluster's hosts, with host i's key file.
func keyedQuorumEnv(c *cluster, keyfile func(int) string) func(int) []string {
	var peers []string
	for _, h := range c.lan.Hosts {
		peers = append(peers, h.IP+":7950")
	}
	return func(i int) []string {
		return []string{"MCNODE_KEYFILE=" + keyfile(i), "MCNODE_MODE=quorum", "MCNODE_ALGO=maekawa", "MCNODE_COTERIE=majority",
			"MCNODE_PEERS=" + strings.Join(peers, ","), fmt.Sprintf("MCNODE_NODE_ID=%d", i)}
	}
}

func keyOnEveryHost(c *cluster, hosts int, path string, keyfile func(int) string) {
	c.t.Helper()
	if out, err := c.mcnode(0, "keygen", path).CombinedOutput(); err != nil {
		c.t.Fatalf("mcnode keygen: %v: %s", err, out)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatal(err)
	}
	for i := range hosts {
		if err := os.MkdirAll(filepath.Dir(keyfile(i)), 0o700); err != nil {
			c.t.Fatal(err)
		}
		if err := os.WriteFile(keyfile(i), data, 0o600); err != nil {
			c.t.Fatal(err)
		}
	}
}

// A quorum node with another key: the others' status shows the
// connections that did not authenticate and says what that means. It said
// only "link down" and "0 dropped", where the metrics counted hundreds
// (black-box round).
func TestE2EQuorumStatusNamesKeyMismatch(t *testing.T) {
	const hosts = 3
	c := &cluster{t: t, lan: netns.NewLAN(t, hosts), dir: t.TempDir(), daemons: make([]*exec.Cmd, hosts)}
	keyfile := func(i int) string { return filepath.Join(c.dir, fmt.Sprintf("host%d.key", i)) }
	keyOnEveryHost(c, hosts, filepath.Join(c.dir, "group.key"), keyfile)
	if err := os.Remove(keyfile(2)); err != nil {
		t.Fatal(err)
	}
	if out, err := c.mcnode(0, "keygen", keyfile(2)).CombinedOutput(); err != nil {
		t.Fatalf("mcnode keygen: %v: %s", err, out)
	}
	c.env = keyedQuorumEnv(c, keyfile)
	for i := range hosts {
		c.startDaemon(i)
	}
	v := c.waitStatus(0, "connections refused as unauthenticated", func(v *statusView) bool { return v.Drops["unauthenticated"] > 0 })
	if len(v.Members) != hosts || v.Members[2].Link != "down" || !strings.Contains(v.QuorumText, "did not authenticate") {
		t.Errorf("status of node 0 beside a node with another key: %+v", v)
	}
	out, err := c.mcnode(0, "status").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "unauthenticated") {
		t.Errorf("mcnode status: %v: %s", err, out)
	}
}
