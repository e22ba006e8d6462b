package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcnode/mcnode/seal"
)

// The demo refuses what mcnode run refuses of the group's flags it lists,
// with run's words, and does not take the flags it would ignore: it once
// ran with its defaults whatever --keyfile, --group, --address or the
// timings said. Every case runs 200 ms at most should it run at all (in
// multicast mode inside a private namespace, the demo's default, so that
// nothing is sent on a real interface).
func TestDemoRefusesBadFlags(t *testing.T) {
	short := []string{"demo", "--nodes", "3", "--duration", "200ms"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--tick", "0"}, "--tick 0s must be at least 1ms"},
		{[]string{"--turn-length", "0"}, "--turn-length 0: a turn needs at least one decision"},
		{[]string{"--max-members", "2"}, "--nodes 3 is more than --max-members 2"},
		{[]string{"--lease", "1ms"}, "--lease 1ms must exceed"},
		{[]string{"--heartbeat", "1h"}, "must be at least four heartbeats (--heartbeat 1h0m0s)"},
		{[]string{"--rate-limit", "0"}, "--rate-limit 0: give datagrams a second"},
		{[]string{"--address", "1.2.3.4:5"}, `--address "1.2.3.4:5" is not an IPv4 multicast address`},
		{[]string{"--group", ""}, "--group is empty"},
		{[]string{"--mode", "quorum", "--keyfile", "/nonexistent"}, "--keyfile: seal: key file: open /nonexistent"},
		// In multicast mode the key is read in the namespace: a missing
		// file is said before one is made.
		{[]string{"--keyfile", "/nonexistent"}, "--keyfile: stat /nonexistent"},
		{[]string{"--mode", "quorum", "--group", ""}, "--group is empty"},
		// Quorum mode's nodes take no multicast timings.
		{[]string{"--mode", "quorum", "--lease", "2s"}, "--lease applies to the demo's multicast mode only"},
		{[]string{"--mode", "quorum", "--algo", "central", "--coterie", "tree"}, "--coterie applies to maekawa, cao-singhal and kakugawa only, not to central"},
		{[]string{"--mode", "quorum", "--address", "239.192.77.9:7000"}, "--address applies to the demo's multicast mode only"},
		// Flags it does not list are unknown.
		{[]string{"--ttl", "0"}, "flag provided but not defined: -ttl"},
		{[]string{"--bind", "127.0.0.1:7000"}, "flag provided but not defined: -bind"},
		{[]string{"--state-dir", "none"}, "flag provided but not defined: -state-dir"},
		{[]string{"--socket", "/nonexistent/s"}, "flag provided but not defined: -socket"},
		{[]string{"--join-timeout", "1s"}, "flag provided but not defined: -join-timeout"},
		{[]string{"--mode", "quorum", "--listen", "127.0.0.1:0"}, "flag provided but not defined: -listen"},
	}
	for _, tc := range cases {
		args := append(append([]string(nil), short...), tc.args...)
		out, code := mcnodeLocal(args...)
		if code != exitUsage || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("mcnode %q: status %d, output %q; want status 2 and one line with %q", args, code, out, tc.want)
		}
	}
	// A variable exported for this host's daemons is no flag its user
	// typed: quorum mode leaves it unused rather than refuse.
	if out, code := mcnodeLocalIn("", []string{"MCNODE_LEASE=2s"}, append(short, "--mode", "quorum")...); code != 0 {
		t.Errorf("MCNODE_LEASE=2s mcnode demo --mode quorum: status %d, output %q; want it run", code, out)
	}
	help, _ := mcnodeLocal("demo", "--help")
	for _, flag := range []string{"--ttl", "--bind", "--state-dir", "--socket", "--join-timeout", "--peers", "--node-id", "--listen", "--quorum-size"} {
		if strings.Contains(help, flag+" ") {
			t.Errorf("mcnode demo --help lists %s, which the demo does not take", flag)
		}
	}
}

// The demo's group is the one its flags describe: the name (not
// MCNODE_GROUP's, which names the user's group), the key, and in multicast
// mode the address and the timings, as its banner says.
func TestDemoTakesGroupFlags(t *testing.T) {
	dir := t.TempDir()
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	keyfile := filepath.Join(dir, "group.key")
	if err := seal.WriteKeyFile(keyfile, key); err != nil {
		t.Fatal(err)
	}
	id := seal.FormatID(key.ID())
	short := []string{"demo", "--nodes", "3", "--resources", "1", "--duration", "200ms"}
	run := func(env []string, args ...string) string {
		t.Helper()
		args = append(append([]string(nil), short...), args...)
		out, code := mcnodeLocalIn("", env, args...)
		if code != 0 {
			if strings.Contains(out, "cannot create a private network namespace") {
				t.Skipf("no private network namespace here for the multicast demo: %s", out)
			}
			t.Fatalf("mcnode %q: status %d:\n%s", args, code, out)
		}
		return out
	}
	// Quorum mode: TCP on 127.0.0.1, no namespace needed.
	out := run([]string{"MCNODE_GROUP=production"}, "--mode", "quorum")
	if want := `group "mcnode-demo"; no key`; !strings.Contains(out, want) {
		t.Errorf("MCNODE_GROUP=production mcnode demo --mode quorum said:\n%s\nwant %q", out, want)
	}
	out = run(nil, "--mode", "quorum", "--group", "g-q", "--keyfile", keyfile)
	if want := `group "g-q"; links authenticated with key ` + id; !strings.Contains(out, want) {
		t.Errorf("mcnode demo --mode quorum --group g-q --keyfile said:\n%s\nwant %q", out, want)
	}
	// Multicast mode, in the private namespace the demo makes.
	out = run(nil, "--group", "g-m", "--address", "239.192.77.9:7000", "--tick", "5ms", "--lease", "2s", "--keyfile", keyfile)
	if want := `group "g-m" at 239.192.77.9:7000; tick 5ms, lease 2s`; !strings.Contains(out, want) || !strings.Contains(out, "sealed with key "+id) {
		t.Errorf("mcnode demo --group g-m --address ... --keyfile said:\n%s\nwant %q and the key %s", out, want, id)
	}
}
