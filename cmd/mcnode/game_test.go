package main

import (
	"strings"
	"testing"
)

// Bad combinations of mcnode game's flags give one line naming the
// problem, and status 2, before any node starts.
func TestGameUsageErrors(t *testing.T) {
	quorum := []string{"game", "--headless", "--mode", "quorum"}
	lanQuorum := []string{"game", "--headless", "--bot", "--mode", "quorum"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"game", "x"}, `game takes no arguments, got "x"`},
		{[]string{"game", "x", "--headless"}, "game takes no arguments"}, // flags after an argument are arguments
		{[]string{"game"}, "the game's screen needs a terminal"},
		{[]string{"game", "--mode", "raft"}, `--mode "raft"`},
		{[]string{"game", "--headless", "--bots", "-1"}, "--bots -1: want 0 to 32"},
		{[]string{"game", "--headless", "--bots", "33"}, "--bots 33: want 0 to 32"},
		{[]string{"game", "--headless", "--bots", "0"}, "no players: add --bots"},
		{[]string{"game", "--headless", "--bot"}, "--bot applies on a LAN"},
		{[]string{"game", "--headless", "--interface", "lo", "--bots", "2"}, "--bots applies on one host"},
		{[]string{"game", "--interface", "lo", "--watch", "--bot"}, "--watch and --bot"},
		{[]string{"game", "--watch", "--headless"}, "--watch and --headless"},
		{[]string{"game", "--json"}, "--json applies to --headless only"},
		{[]string{"game", "--headless", "--duration", "-1s"}, "--duration must not be negative"},
		{[]string{"game", "--headless", "--duration", "soon"}, "invalid value"},
		{[]string{"game", "--headless", "--target", "0"}, "--target 0: want at least 1"},
		{[]string{"game", "--headless", "--name", "a b"}, `--name "a b"`},
		{[]string{"game", "--headless", "--name", strings.Repeat("x", 17)}, "--name"},
		{[]string{"game", "--headless", "--name", "bot2"}, "on one host the bots are bot1, bot2"},
		{[]string{"game", "--headless", "--ttl", "2"}, "--address, --ttl, --bind and --join-timeout apply on a LAN"},
		{[]string{"game", "--headless", "--address", "239.1.2.3:5000"}, "--address, --ttl, --bind and --join-timeout apply on a LAN"},
		{[]string{"game", "--headless", "--join-timeout", "5s"}, "--join-timeout apply on a LAN"},
		// As mcnode run and the demo refuse them (the game took them
		// silently: black-box round).
		{append(quorum, "--bots", "2", "--algo", "central", "--coterie", "tree"), "--coterie applies to maekawa, cao-singhal and kakugawa only, not to central"},
		{append(quorum, "--bots", "2", "--tick", "5ms"), "--tick applies to the game's multicast mode only"},
		// A game keeps no state and serves no local client.
		{[]string{"game", "--headless", "--socket", "/nonexist/x.sock"}, "flag provided but not defined: -socket"},
		{[]string{"game", "--headless", "--state-dir", "/nonexist/state"}, "flag provided but not defined: -state-dir"},
		{[]string{"game", "--headless", "--peers", "a:1,b:2"}, "--peers applies to quorum mode only"},
		{[]string{"game", "--headless", "--quorum-size", "3"}, "--quorum-size applies to quorum mode only"},
		{append(quorum, "--algo", "paxos"), "--algo: unknown protocol"},
		{append(quorum, "--coterie", "ring"), "--coterie: unknown coterie"},
		{append(quorum, "--keyfile", "/nonexistent/k.key"), "--keyfile"},
		{append(quorum, "--bots", "2", "--quorum-size", "3"), "--bots applies on one host"},
		{append(lanQuorum, "--interface", "lo"), "quorum mode needs --peers"},
		{append(lanQuorum, "--peers", "a:1,b:2"), "--node-id -1"},
		{append(lanQuorum, "--peers", "a:1,a:1", "--node-id", "0"), "lists a:1 twice"},
		{append(lanQuorum, "--quorum-size", "3"), "no --interface"},
		{append(lanQuorum, "--quorum-size", "-1", "--interface", "lo"), "--quorum-size -1"},
		{append(lanQuorum, "--quorum-size", "3", "--interface", "lo", "--listen", "127.0.0.1:0"), "--listen goes with --peers"},
		{append(lanQuorum, "--quorum-size", "3", "--interface", "lo", "--algo", "paxos"), "--algo: unknown protocol"},
	}
	for _, tc := range cases {
		out, code := mcnodeLocal(tc.args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != exitUsage || len(lines) != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("mcnode %s: status %d, output %q; want status 2 and one line with %q", strings.Join(tc.args, " "), code, out, tc.want)
		}
	}
}
