package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"

	"github.com/mcnode/mcnode/seal"
)

// mcnodeLocal runs the test binary as mcnode with a clean environment, on
// this host: only for commands that stop before touching the network.
func mcnodeLocal(args ...string) (string, int) {
	return mcnodeLocalIn("", nil, args...)
}

// mcnodeLocalIn is mcnodeLocal in the directory dir ("": this one), with
// env added to the clean environment.
func mcnodeLocalIn(dir string, env []string, args ...string) (string, int) {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"MCNODE_TEST_MAIN=1", "PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "GORACE=atexit_sleep_ms=0"}, env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	return string(out), 0
}

// The multicast settings a quorum node given --peers refuses on its
// command line are left unused when a variable sets them: exported for
// this host's multicast daemons, they must not stop a quorum node.
func TestQuorumNodeLeavesMulticastVariablesUnused(t *testing.T) {
	env := []string{"MCNODE_TICK=20ms", "MCNODE_INTERFACE=lo", "MCNODE_FOUND=1", "MCNODE_COTERIE=grid", "MCNODE_ALGO=central"}
	out, code := mcnodeLocalIn("", env, "run", "--mode", "quorum", "--peers", "a:1,b:2")
	if code != exitUsage || !strings.Contains(out, "--node-id -1") {
		t.Errorf("status %d, output %q; want status 2 for the missing --node-id only", code, out)
	}
}

// A command line refused for want of --interface leaves no state
// directory behind (status, lock and run once made it first). Without a
// daemon to ask, that is status's no group (1) and lock's (4), and a usage
// error for run.
func TestUsageErrorMakesNoStateDir(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	env := []string{"XDG_STATE_HOME=" + state, "XDG_RUNTIME_DIR=" + t.TempDir()}
	for _, tc := range []struct {
		args []string
		code int
	}{{[]string{"status"}, 1}, {[]string{"lock", "x", "--", "true"}, exitNoGroup}, {[]string{"run"}, exitUsage}} {
		args := tc.args
		out, code := mcnodeLocalIn("", env, args...)
		if code != tc.code || !strings.Contains(out, "no --interface") {
			t.Errorf("mcnode %s: status %d, output %q; want status %d for want of --interface", strings.Join(args, " "), code, out, tc.code)
		}
		if _, err := os.Stat(state); err == nil {
			t.Fatalf("mcnode %s made the state directory %s, and was refused", strings.Join(args, " "), state)
		}
	}
}

// No group to ask is status 4 for mcnode lock, apart from a lock held
// elsewhere (1), so that "mcnode lock -n X -- CMD || echo busy" does not
// take a broken setup for a busy lock; status keeps 1.
func TestLockNoGroupStatus(t *testing.T) {
	env := []string{"XDG_RUNTIME_DIR=" + t.TempDir(), "XDG_STATE_HOME=" + t.TempDir()}
	out, code := mcnodeLocalIn("", env, "lock", "--mode", "quorum", "-n", "x", "--", "true")
	if code != exitNoGroup || !strings.Contains(out, "no daemon serves") {
		t.Errorf("mcnode lock in quorum mode without a daemon: status %d, %q; want %d", code, out, exitNoGroup)
	}
	out, code = mcnodeLocalIn("", env, "status", "--mode", "quorum")
	if code != 1 || !strings.Contains(out, "no daemon serves") {
		t.Errorf("mcnode status in quorum mode without a daemon: status %d, %q; want 1", code, out)
	}
}

// No daemon at the control socket (the group's, or --socket's) and no
// --interface to join the group without one is no group to ask, as the
// README has it: status 4 for mcnode lock, 1 for mcnode status, in one line
// that says where it looked. It was a usage error (2), though nothing on
// the command line was wrong: the daemon may just be restarting (black-box
// round). --no-daemon without --interface, and a group whose socket no
// daemon can listen at, are still usage errors (TestUsageErrors).
func TestNoDaemonNoInterfaceStatus(t *testing.T) {
	env := []string{"XDG_RUNTIME_DIR=" + t.TempDir(), "XDG_STATE_HOME=" + t.TempDir()}
	sock := filepath.Join(t.TempDir(), "q.sock")
	for _, tc := range []struct {
		args []string
		env  []string
		code int
		want string
	}{
		{[]string{"lock", "-g", "nodaemon", "x", "--", "true"}, nil, exitNoGroup, `no daemon of group "nodaemon" at `},
		{[]string{"status", "-g", "nodaemon"}, nil, 1, `no daemon of group "nodaemon" at `},
		// A socket given names no group (a quorum daemon's of group q was
		// once looked for as group "mcnode"'s).
		{[]string{"lock", "--socket", sock, "x", "--", "true"}, nil, exitNoGroup, "no daemon at " + sock + ", and no --interface"},
		{[]string{"status", "--socket", sock}, nil, 1, "no daemon at " + sock + ", and no --interface"},
		{[]string{"lock", "-n", "x", "--", "true"}, []string{"MCNODE_SOCKET=" + sock}, exitNoGroup, "no daemon at " + sock + ", and no --interface"},
		{[]string{"status"}, []string{"MCNODE_SOCKET=" + sock}, 1, "no daemon at " + sock + ", and no --interface"},
		// What follows "--" is the command, "-c" too; a name of 128
		// bytes is one: both get as far as looking for the daemon.
		{[]string{"lock", "x", "--", "-c"}, nil, exitNoGroup, "no --interface"},
		{[]string{"lock", strings.Repeat("n", 128), "--", "true"}, nil, exitNoGroup, "no --interface"},
	} {
		out, code := mcnodeLocalIn("", append(env, tc.env...), tc.args...)
		if lines := strings.Split(strings.TrimSpace(out), "\n"); code != tc.code || len(lines) != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("mcnode %s (%v): status %d, output %q; want status %d and one line with %q", strings.Join(tc.args, " "), tc.env, code, out, tc.code, tc.want)
		}
	}
}

// Bad flags and arguments give one line naming the problem, and status 2.
func TestUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "flag provided but not defined"},
		{[]string{"nosuchcmd"}, "unknown command \"nosuchcmd\" (see mcnode --help)"},
		{[]string{"keys", "bogus"}, "unknown command \"bogus\" for mcnode keys"},
		{[]string{"help", "bogus"}, "unknown command \"bogus\" (see mcnode --help)"},
		{[]string{"run", "--interface", "lo", "--turn-length", "5000"}, "the fixed log window"},
		{[]string{"run"}, "no --interface"},
		{[]string{"run", "--interface", "lo", "--ttl", "300"}, "--ttl 300"},
		{[]string{"run", "--interface", "lo", "--address", "10.0.0.1:1"}, "--address"},
		{[]string{"run", "--interface", "lo", "--lease", "500ms"}, "--lease 500ms must exceed"},
		{[]string{"run", "--interface", "lo", "--heartbeat", "0s"}, "--heartbeat 0s must be positive"},
		{[]string{"run", "--interface", "lo", "--takeover-timeout", "5s"}, "--takeover-timeout 5s must be at most half --lease 1.5s"},
		{[]string{"lock"}, "usage: mcnode lock NAME"},
		{[]string{"lock", "x", "--"}, "no COMMAND"},
		{[]string{"lock", "--no-daemon", "x", "--", "true"}, "no --interface"},
		{[]string{"lock", "--no-daemon", "-i", "nonexist0", "x", "--", "true"}, `--interface "nonexist0": `},
		{[]string{"lock", "--no-daemon", "--interface", "lo", "--tick", "0s", "x", "--", "true"}, "--tick"},
		{[]string{"lock", "--timeout", "soon", "x", "--", "true"}, "invalid value"},
		{[]string{"status", "--log-level", "loud"}, "--log-level"},
		{[]string{"demo", "--nodes", "0"}, "--nodes"},
		{[]string{"run", "--mode", "raft"}, "--mode \"raft\""},
		{[]string{"run", "--interface", "lo", "--peers", "a:1,b:2"}, "--peers applies to quorum mode only"},
		{[]string{"run", "--mode", "quorum"}, "needs --peers"},
		{[]string{"run", "--mode", "quorum", "--peers", "a:1,b:2"}, "--node-id -1"},
		{[]string{"run", "--mode", "quorum", "--peers", "a:1,a:1", "--node-id", "0"}, "lists a:1 twice"},
		{[]string{"run", "--mode", "quorum", "--peers", "a:1", "--node-id", "0", "--algo", "paxos"}, "--algo: unknown protocol"},
		{[]string{"run", "--mode", "quorum", "--peers", "a:1", "--node-id", "0", "--coterie", "ring"}, "--coterie: unknown coterie"},
		{[]string{"run", "--mode", "quorum", "--quorum-size", "3"}, "no --interface"},
		{[]string{"run", "--mode", "quorum", "--peers", "a:1,b:2", "--node-id", "0", "--quorum-size", "2"}, "--peers and --quorum-size both"},
		// A quorum node given its peers joins no multicast group: what
		// sets one up is refused, not ignored, as is a coterie that a
		// protocol without quorums would ignore.
		{[]string{"run", "--mode", "quorum", "--peers", "a:1,b:2", "--node-id", "0", "--tick", "20ms"}, "--tick applies to the multicast group, which a quorum node given --peers does not join"},
		{[]string{"run", "--mode", "quorum", "--peers", "a:1,b:2", "--node-id", "0", "-i", "lo"}, "--interface applies to the multicast group"},
		{[]string{"run", "--mode", "quorum", "--peers", "a:1,b:2", "--node-id", "0", "--found"}, "--found applies to the multicast group"},
		{[]string{"game", "--headless", "--bot", "--mode", "quorum", "--peers", "a:1,b:2", "--node-id", "0", "--heartbeat", "1s"}, "--heartbeat applies to the multicast group"},
		{[]string{"run", "--mode", "quorum", "--peers", "a:1,b:2", "--node-id", "0", "--algo", "central", "--coterie", "grid"}, "--coterie applies to maekawa, cao-singhal and kakugawa only, not to central"},
		// Bad lease and peer values are usage errors, said at once (status
		// 1 from the started node before; found by review); a lease typed
		// for a protocol that gives locks none is refused, not ignored.
		{[]string{"run", "--mode", "quorum", "--peers", "a:1,b:2", "--node-id", "0", "--algo", "maekawa", "--coterie", "majority", "--lease", "100ms", "--lease-margin", "200ms"}, "--lease 100ms must exceed --lease-margin 200ms"},
		{[]string{"run", "--mode", "quorum", "--peers", "a:1,b:2", "--node-id", "0", "--algo", "central", "--lease", "2s"}, "--lease applies to maekawa and cao-singhal only"},
		{[]string{"run", "--mode", "quorum", "--peers", "notanaddress,b:2", "--node-id", "1", "--algo", "central"}, "--peers: node 0's address \"notanaddress\""},
		{[]string{"run", "--mode", "quorum", "--peers", "a:0,b:2", "--node-id", "1", "--algo", "central"}, "--peers: node 0's address \"a:0\""},
		{[]string{"run", "--interface", "lo", "--listen", "127.0.0.1:0"}, "--listen applies to quorum mode only"},
		{[]string{"run", "--mode", "quorum", "--quorum-size", "3", "--listen", "127.0.0.1:0"}, "--listen goes with --peers"},
		{[]string{"run", "--mode", "quorum", "--peers", "a:1,b:2", "--node-id", "0", "--listen", "no-port"}, "--listen no-port"},
		{[]string{"bench", "--memory-n", "1"}, "--memory-n 1"},
		{[]string{"bench", "--memory-locks", "0"}, "--memory-locks 0"},
		{[]string{"lock", "--mode", "quorum", "--no-daemon", "x", "--", "true"}, "--no-daemon does not work in quorum mode"},
		{[]string{"demo", "--mode", "quorum", "--peers", "a:1"}, "flag provided but not defined: -peers (see mcnode demo --help)"},
		{[]string{"bench", "--n", "64"}, "-n: \"64\" is not a group size from 2 to 32"},
		{[]string{"bench", "--sim-n", "1"}, "--sim-n"},
		{[]string{"bench", "--layers", "cloud"}, "--layers"},
		{[]string{"bench", "--loads", "medium"}, "--loads"},
		{[]string{"bench", "--protocols", "paxos"}, "unknown protocol \"paxos\""},
		{[]string{"bench", "--coteries", "ring"}, "unknown coterie \"ring\""},
		{[]string{"bench", "--duration", "1ms"}, "--duration 1ms"},
		{[]string{"bench", "--sim-entries", "0"}, "--sim-entries 0"},
		{[]string{"bench", "--plot-format", "gif", "--plots", "x"}, "--plot-format \"gif\""},
		{[]string{"bench", "--plot-format", "svg"}, "--plot-format needs --plots"},
		{[]string{"bench", "extra"}, "bench takes no arguments"},
		// A flag after NAME would be taken for the command, and run only
		// once the lock was held; after "--" it is the command.
		{[]string{"lock", "x", "--timeout", "1s", "--", "true"}, "\"--timeout\" follows the lock name \"x\": flags go before NAME"},
		{[]string{"lock", "x", "-n", "true"}, "flags go before NAME"},
		// Lock names the group could not carry, refused before any contact.
		{[]string{"lock", "", "--", "true"}, "lock name is empty"},
		{[]string{"lock", strings.Repeat("n", 129), "--", "true"}, "is 129 bytes, longer than the limit of 128 bytes"},
		{[]string{"lock", "\xff", "--", "true"}, "not valid UTF-8"},
		// Negative durations do not mean "forever", nor a tick of 1ns work.
		{[]string{"lock", "-w", "-5s", "x", "--", "true"}, "--timeout -5s is negative"},
		// (No --interface: were the tick accepted, the command would stop
		// there rather than run a node.)
		{[]string{"run", "--tick", "1ns"}, "--tick 1ns must be at least 1ms"},
		{[]string{"run", "-i", "lo", "--metrics-addr", "nope"}, `--metrics-addr "nope": want host:port`},
		{[]string{"demo", "--host-network", "--interface", "nope0"}, `--interface "nope0"`},
		{[]string{"demo", "--interface", "lo"}, "--interface applies with --host-network only"},
		// A rule that cites fields names the flags, and the fixed value.
		{[]string{"run", "-i", "lo", "--lease", "500ms"}, "--lease 500ms must exceed 2*(--turn-timeout + the fixed ping timeout 200ms) = 1.4s"},
		{[]string{"lock", "--no-daemon", "--tick", "999us", "x", "--", "true"}, "--tick 999µs must be at least 1ms"},
		{[]string{"run", "--mode", "quorum", "--peers", "a:1", "--node-id", "0", "--lease", "-1s"}, "--lease -1s is negative"},
		{[]string{"run", "--mode", "quorum", "--peers", "a:1", "--node-id", "0", "--lease-margin", "-1ms"}, "--lease-margin -1ms is negative"},
		// A control socket path over the 107 bytes of sun_path.
		{[]string{"run", "--interface", "lo", "--group", strings.Repeat("g", 100)}, "give the group a shorter name, or the socket a shorter path with --socket"},
		// No daemon can serve such a group, so lock and status go on
		// without one (and stop here for want of --interface).
		{[]string{"lock", "--group", strings.Repeat("g", 100), "x", "--", "true"}, "no --interface"},
		{[]string{"status", "--group", strings.Repeat("g", 100)}, "no daemon can serve group \"" + strings.Repeat("g", 100) + "\" (its control socket's path would be too long: mcnode run refuses it), and no --interface"},
		{[]string{"lock", "--socket", "/" + strings.Repeat("s", 110), "x", "--", "true"}, "is 111 bytes"},
		// The program's name once appeared twice here.
		{[]string{"--verbose"}, "(see mcnode --help)"},
		{[]string{"version", "extra"}, "version takes no arguments"},
		// Flags after an argument are not parsed: without the check, this
		// would run a daemon in the group "mcnode".
		{[]string{"run", "-i", "lo", "build-farm"}, `run takes no arguments, got "build-farm" (flags go before any argument)`},
		{[]string{"demo", "extra"}, `demo takes no arguments, got "extra"`},
		{[]string{"status", "extra"}, `status takes no arguments, got "extra"`},
		{[]string{"keys", "list", "extra"}, `keys list takes no arguments, got "extra"`},
	}
	for _, tc := range cases {
		out, code := mcnodeLocal(tc.args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != exitUsage || len(lines) != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("mcnode %s: status %d, output %q; want status 2 and one line with %q", strings.Join(tc.args, " "), code, out, tc.want)
		}
	}
}

func TestHelpListsCommands(t *testing.T) {
	out, code := mcnodeLocal("--help")
	for _, cmd := range []string{"run", "lock", "status", "demo", "bench"} {
		if code != 0 || !strings.Contains(out, cmd) {
			t.Fatalf("--help (status %d) does not list %s:\n%s", code, cmd, out)
		}
	}
}

// mcnode keygen without a file prints the key itself, one line that reads
// back as a key (it once printed only the key's ID).
func TestKeygenPrintsTheKey(t *testing.T) {
	out, code := mcnodeLocal("keygen")
	if code != 0 {
		t.Fatalf("mcnode keygen: status %d: %s", code, out)
	}
	if _, err := seal.ParseKey(out); err != nil {
		t.Fatalf("mcnode keygen printed %q: %v", out, err)
	}
}

// TestCLIBadEnvironmentValue: an environment variable whose value its flag
// cannot parse (MCNODE_HEARTBEAT=abc) keeps no command from showing its
// help, nor the shell from completing (urfave/cli refused both, and
// panicked completing); a command run with it stops, naming the variable,
// with status 2, before it does anything. Every command and variable,
// taken from the app itself.
func TestCLIBadEnvironmentValue(t *testing.T) {
	const bad = "not-a-value"
	type envFlag interface{ GetEnvVars() []string }
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			path := append(slices.Clone(path), cmd.Name)
			var vars, parsed []string // every variable; those of flags that parse theirs
			for _, f := range cmd.Flags {
				ef, ok := f.(envFlag)
				if !ok {
					continue
				}
				vars = append(vars, ef.GetEnvVars()...)
				if !takesAnyString(f) {
					parsed = append(parsed, ef.GetEnvVars()...)
				}
			}
			t.Run(strings.Join(path, "_")+"/help", func(t *testing.T) {
				for _, v := range vars {
					t.Setenv(v, bad)
				}
				out, err := runApp(t, append(path, "--help")...)
				if err != nil || !strings.Contains(out, "NAME:\n   mcnode "+strings.Join(path, " ")) {
					t.Errorf("mcnode %s --help with %v set to %q: %v\n%s", strings.Join(path, " "), vars, bad, err, out)
				}
			})
			for _, v := range parsed {
				t.Run(strings.Join(path, "_")+"/"+v, func(t *testing.T) {
					t.Setenv(v, bad)
					_, err := runApp(t, path...)
					var ee *exitError
					if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), `"`+v+`"`) || !strings.Contains(err.Error(), `"`+bad+`"`) {
						t.Errorf("mcnode %s with %s=%s: %v; want a usage error naming the variable and its value", strings.Join(path, " "), v, bad, err)
					}
				})
			}
			walk(path, cmd.Subcommands)
		}
	}
	walk(nil, newApp().Commands)

	// As a user meets it, and completing.
	env := []string{"MCNODE_HEARTBEAT=abc"}
	if out, code := mcnodeLocalIn("", env, "run", "--help"); code != 0 || !strings.Contains(out, "--heartbeat value") {
		t.Errorf("MCNODE_HEARTBEAT=abc mcnode run --help: status %d:\n%s", code, out)
	}
	if out, code := mcnodeLocalIn("", env, "run", "--hea", "--generate-bash-completion"); code != 0 || strings.TrimSpace(out) != "--heartbeat" {
		t.Errorf("MCNODE_HEARTBEAT=abc mcnode run --hea<Tab>: status %d: %q, want --heartbeat", code, out)
	}
	// (Without --interface, so that nothing joins a group should the
	// check be lost: run would stop at "no --interface".)
	want := `could not parse "abc" as duration value from environment variable "MCNODE_HEARTBEAT" for flag heartbeat`
	if out, code := mcnodeLocalIn("", env, "run"); code != exitUsage || !strings.Contains(out, want) || strings.Count(out, "\n") != 1 {
		t.Errorf("MCNODE_HEARTBEAT=abc mcnode run: status %d: %q, want status 2 and one line with %q", code, out, want)
	}
}

// takesAnyString: f takes any value its environment variable holds.
func takesAnyString(f cli.Flag) bool {
	switch f.(type) {
	case *cli.StringFlag, *altsrc.StringFlag:
		return true
	}
	return false
}

// runApp runs mcnode with args in this process, every command's action
// failing the test (the cases stop before it), and returns what it printed.
func runApp(t *testing.T, args ...string) (string, error) {
	t.Helper()
	app := newApp()
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	var stub func([]*cli.Command)
	stub = func(cmds []*cli.Command) {
		for _, cmd := range cmds {
			name := cmd.Name
			cmd.Action = func(*cli.Context) error {
				t.Errorf("mcnode %s ran", name)
				return nil
			}
			stub(cmd.Subcommands)
		}
	}
	stub(app.Commands)
	err := app.Run(append([]string{"mcnode"}, args...))
	return out.String(), err
}

// mcnode --version, -v and mcnode version print one line: the module's
// version, and the Go that built it.
func TestCLIVersion(t *testing.T) {
	var first string
	for _, args := range [][]string{{"--version"}, {"-v"}, {"version"}} {
		out, code := mcnodeLocal(args...)
		if code != 0 || !strings.HasPrefix(out, "mcnode version ") || strings.Count(out, "\n") != 1 || !strings.Contains(out, runtime.Version()) {
			t.Errorf("mcnode %s: status %d, %q; want one line \"mcnode version ...\" naming %s", strings.Join(args, " "), code, out, runtime.Version())
		}
		if first == "" {
			first = out
		} else if out != first {
			t.Errorf("mcnode %s: %q, but mcnode --version: %q", strings.Join(args, " "), out, first)
		}
	}
	if out, code := mcnodeLocal("--help"); code != 0 || !strings.Contains(out, "--version") || !strings.Contains(out, "version ") {
		t.Errorf("mcnode --help (status %d) lists neither --version nor the version command:\n%s", code, out)
	}
}

// The version line from the build information: a release by its tag, a
// build from a checkout by its commit (and whether the tree had changes),
// and a build with neither still by the Go that built it.
func TestCLIVersionOf(t *testing.T) {
	const rev = "7f11a7c4e2b1d7e2b8a0f6c5d4e3b2a1f0e9d8c7"
	build := func(version string, settings ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{GoVersion: "go1.26.0", Path: "github.com/mcnode/mcnode/cmd/mcnode",
			Main: debug.Module{Path: "github.com/mcnode/mcnode", Version: version}}
		for _, s := range settings {
			k, v, _ := strings.Cut(s, "=")
			info.Settings = append(info.Settings, debug.BuildSetting{Key: k, Value: v})
		}
		return info
	}
	for _, tc := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{build("v1.2.0"), "v1.2.0, go1.26.0 linux/amd64"},
		{build("v0.0.0-20260102150405-7f11a7c4e2b1+dirty", "vcs=git", "vcs.revision="+rev, "vcs.time=2026-01-02T15:04:05Z", "vcs.modified=true"),
			"v0.0.0-20260102150405-7f11a7c4e2b1+dirty, commit " + rev + " of 2026-01-02T15:04:05Z, modified, go1.26.0 linux/amd64"},
		{build("(devel)", "vcs=git", "vcs.revision="+rev, "vcs.modified=false"), "(devel), commit " + rev + ", go1.26.0 linux/amd64"},
		// No commit recorded (-buildvcs=false, a git worktree): it says so
		// (it printed only "(devel), go1.26.8": black-box round).
		{build("(devel)"), "(devel), no commit recorded, go1.26.0 linux/amd64"},
		{build(""), "(devel), no commit recorded, go1.26.0 linux/amd64"},
	} {
		if got := versionOf(tc.info, "linux/amd64"); got != tc.want {
			t.Errorf("version %q, settings %v: %q, want %q", tc.info.Main.Version, tc.info.Settings, got, tc.want)
		}
	}
	// make build's -X values stand in for the settings go build did not
	// record, and only then.
	const other = "0123456789abcdef0123456789abcdef01234567"
	defer func(r, at, m string) { buildRevision, buildTime, buildModified = r, at, m }(buildRevision, buildTime, buildModified)
	buildRevision, buildTime, buildModified = other, "2026-02-03T04:05:06Z", "true"
	for _, tc := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{build("(devel)"), "(devel), commit " + other + " of 2026-02-03T04:05:06Z, modified, go1.26.0 linux/amd64"},
		{build("(devel)", "vcs=git", "vcs.revision="+rev, "vcs.modified=false"), "(devel), commit " + rev + ", go1.26.0 linux/amd64"},
	} {
		if got := versionOf(tc.info, "linux/amd64"); got != tc.want {
			t.Errorf("with make build's commit, version %q, settings %v: %q, want %q", tc.info.Main.Version, tc.info.Settings, got, tc.want)
		}
	}
}

// mcnode keygen - prints the key, as without FILE, and writes no file
// named "-" (it once did); mcnode keygen FILE still creates FILE with mode
// 0600, says so on stderr without the secret, and replaces no file.
func TestKeygenDashIsStdout(t *testing.T) {
	dir := t.TempDir()
	out, code := mcnodeLocalIn(dir, nil, "keygen", "-")
	if code != 0 {
		t.Fatalf("mcnode keygen -: status %d: %s", code, out)
	}
	if _, err := seal.ParseKey(out); err != nil {
		t.Errorf("mcnode keygen - printed %q: %v", out, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("mcnode keygen - left %v in its directory", entries)
	}
	// A file, by name, "./-" included.
	for _, name := range []string{"group.key", "./-"} {
		out, code = mcnodeLocalIn(dir, nil, "keygen", name)
		path := filepath.Join(dir, name)
		info, err := os.Stat(path)
		if code != 0 || err != nil {
			t.Fatalf("mcnode keygen %s: status %d, %v: %s", name, code, err, out)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("mcnode keygen %s: mode %04o, want 0600", name, info.Mode().Perm())
		}
		keys, err := seal.LoadKeyFile(path)
		if err != nil || len(keys) != 1 {
			t.Fatalf("mcnode keygen %s wrote %d keys: %v", name, len(keys), err)
		}
		if !strings.Contains(out, "wrote key "+seal.FormatID(keys[0].ID())) || strings.Contains(out, keys[0].Encode()) {
			t.Errorf("mcnode keygen %s said %q: want the key's ID, not the key", name, out)
		}
		before, _ := os.ReadFile(path)
		if out, code := mcnodeLocalIn(dir, nil, "keygen", name); code != 1 || !strings.Contains(out, "file exists") {
			t.Errorf("mcnode keygen %s again: status %d, %q; want status 1, the file kept", name, code, out)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Errorf("mcnode keygen %s again replaced the key", name)
		}
	}
}
