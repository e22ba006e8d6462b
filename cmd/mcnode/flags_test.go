package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/quick"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode/group"
)

// groupContext is a command's context with only the flags that paths are
// derived from.
func groupContext(group, stateDir string) *cli.Context {
	set := flag.NewFlagSet("test", flag.ContinueOnError)
	set.String("group", group, "")
	set.String("socket", "", "")
	set.String("state-dir", stateDir, "")
	return cli.NewContext(&cli.App{}, set, nil)
}

// Two groups never share a control socket or a state file ("a/b" and "a_b"
// once did), and a name without '/' or '%' keeps the paths it always had,
// so that an upgrade finds a running daemon's socket and the state files
// it left.
func TestGroupPathsDistinct(t *testing.T) {
	run, state := t.TempDir(), t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", run)
	paths := func(group string) (sock, stamp string) {
		t.Helper()
		c := groupContext(group, state)
		sock, err := socketPath(c)
		if err != nil {
			t.Fatalf("group %q: %v", group, err)
		}
		return sock, stampOf(t, c)
	}
	for _, g := range []string{"mcnode", "my-group", "build farm.2", "ünïcode_x"} {
		sock, stamp := paths(g)
		if want := filepath.Join(run, "mcnode", g+".sock"); sock != want {
			t.Errorf("group %q: socket %s, want %s as before", g, sock, want)
		}
		if want := filepath.Join(state, g+".timestamp"); stamp != want {
			t.Errorf("group %q: timestamp file %s, want %s as before", g, stamp, want)
		}
	}
	seen := map[string]string{}
	for _, g := range []string{"a/b", "a_b", "a%2Fb", "a%b", "a%25b", "a%252Fb"} {
		sock, stamp := paths(g)
		if filepath.Dir(sock) != filepath.Join(run, "mcnode") || filepath.Dir(stamp) != state {
			t.Errorf("group %q: %s or %s is not in its directory", g, sock, stamp)
		}
		for _, p := range []string{sock, stamp} {
			if other, dup := seen[p]; dup {
				t.Errorf("groups %q and %q share %s", other, g, p)
			}
			seen[p] = g
		}
	}
	// One to one over any names, and the identity on names without the
	// escaped characters.
	if err := quick.Check(func(a, b string) bool {
		return (groupFileName(a) == groupFileName(b)) == (a == b)
	}, nil); err != nil {
		t.Error(err)
	}
	if err := quick.Check(func(a string) bool {
		return strings.ContainsAny(a, "/%\x00") || groupFileName(a) == a
	}, nil); err != nil {
		t.Error(err)
	}
	if a, b := groupFileName("x/y"), groupFileName("x%2Fy"); a == b {
		t.Errorf("x/y and x%%2Fy both map to %q", a)
	}
}

// A control socket path too long for a Unix socket is refused with a
// message naming the path and what to do, and the longest one accepted can
// really be listened on (the limit is not off by one).
func TestSocketPathLimit(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", dir)
	if err := os.Mkdir(filepath.Join(dir, "mcnode"), 0o700); err != nil {
		t.Fatal(err)
	}
	room := maxSocketPath - len(filepath.Join(dir, "mcnode", ".sock"))
	if room < 1 {
		t.Skipf("the temporary directory %s leaves no room for a socket name", dir)
	}
	path, err := socketPath(groupContext(strings.Repeat("g", room), ""))
	if err != nil {
		t.Fatalf("a group name of %d bytes: %v", room, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("the longest socket path accepted, %d bytes, cannot be listened on: %v", len(path), err)
	}
	l.Close()
	long := strings.Repeat("g", room+1)
	_, err = socketPath(groupContext(long, ""))
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "mcnode", long+".sock")) ||
		!strings.Contains(err.Error(), "--socket") || !strings.Contains(err.Error(), "shorter name") {
		t.Fatalf("a group name of %d bytes: %v; want an error naming the path, --socket and a shorter name", room+1, err)
	}
}

// A membership record that cannot be read keeps the daemon from founding
// the group, as one that says "member" does: it may say so (the daemon
// founded on a guess before); --found overrides both.
func TestUnreadableMembershipRecordFoundsNothing(t *testing.T) {
	for _, found := range []bool{false, true} {
		state := t.TempDir()
		set := flag.NewFlagSet("test", flag.ContinueOnError)
		set.Bool("found", found, "")
		c := cli.NewContext(&cli.App{}, set, nil)
		stamp := filepath.Join(state, "g.timestamp")
		// A directory where the record should be: unreadable even to root.
		if err := os.Mkdir(filepath.Join(state, "g.member"), 0o700); err != nil {
			t.Fatal(err)
		}
		cfg := group.DefaultLANConfig()
		cfg.TimestampFile, cfg.Bootstrap = stamp, true
		why := daemonMembership(c, &cfg, zerolog.Nop())
		switch {
		case !found && (why == "" || cfg.Bootstrap):
			t.Errorf("an unreadable record: waits %q, founds %v; want a reason to wait and no founding", why, cfg.Bootstrap)
		case !found && !strings.Contains(why, "cannot be read"):
			t.Errorf("the reason to wait, %q, does not say the record cannot be read", why)
		case found && (why != "" || !cfg.Bootstrap):
			t.Errorf("an unreadable record with --found: waits %q, founds %v; want it to found", why, cfg.Bootstrap)
		}
	}
}

// A daemon of a group whose name has '/' killed before the upgrade (its
// record under the old file name, "team_x.member") must still wait for its
// group after it: the new release copies the old state files to the new
// names, once. A record the new release removed on a clean leave does not
// come back from the old name, and nothing is copied for a name already in
// use under the new release.
func TestLegacyStateAdopted(t *testing.T) {
	state := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(state, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(state, name))
		return err == nil
	}
	waits := func(stamp string) bool {
		set := flag.NewFlagSet("test", flag.ContinueOnError)
		set.Bool("found", false, "")
		cfg := group.DefaultLANConfig()
		cfg.TimestampFile, cfg.Bootstrap = stamp, true
		return daemonMembership(cli.NewContext(&cli.App{}, set, nil), &cfg, zerolog.Nop()) != "" && !cfg.Bootstrap
	}
	write("team_x.member", "instance 00000000000000aa node 3 joined 2026-01-01T00:00:00Z\n")
	write("team_x.timestamp", "123456\n")
	stamp := stampOf(t, groupContext("team/x", state))
	if want := filepath.Join(state, "team%2Fx.timestamp"); stamp != want {
		t.Fatalf("timestamp file %s, want %s", stamp, want)
	}
	if b, _ := os.ReadFile(stamp); string(b) != "123456\n" {
		t.Errorf("the adopted timestamp file holds %q", b)
	}
	if !waits(stamp) {
		t.Error("after the upgrade the daemon would found the group: the old record was not adopted")
	}
	// A clean leave removes the record; the next start must not adopt it
	// again, or the daemon would wait for a group it left.
	if err := os.Remove(filepath.Join(state, "team%2Fx.member")); err != nil {
		t.Fatal(err)
	}
	stamp = stampOf(t, groupContext("team/x", state))
	if exists("team%2Fx.member") || waits(stamp) {
		t.Error("the old record came back after a clean leave under the new name")
	}

	// A name in use under the new release adopts nothing.
	write("t_y.member", "instance 00000000000000bb node 4 joined 2026-01-01T00:00:00Z\n")
	write("t_y.timestamp", "1\n")
	write("t%2Fy.timestamp", "999999\n")
	stampOf(t, groupContext("t/y", state))
	if exists("t%2Fy.member") {
		t.Error("a record was adopted for a name already in use under the new release")
	}
	// A plain name has one file name in both releases: nothing is copied.
	write("plain.member", "x\n")
	write("plain.timestamp", "1\n")
	before, _ := os.ReadDir(state)
	stampOf(t, groupContext("plain", state))
	if after, _ := os.ReadDir(state); len(after) != len(before) {
		t.Errorf("state files for a plain name: %d before, %d after", len(before), len(after))
	}
}

// stampOf is timestampFile's path for c, which must give one.
func stampOf(t *testing.T, c *cli.Context) string {
	t.Helper()
	stamp, err := timestampFile(c, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return stamp
}

// A --state-dir given that cannot be made is refused (it used to be a
// warning, and the daemon ran without the protection its user asked for);
// the default one only warns.
func TestStateDirGivenCannotBeMade(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	typed := groupContext("g", "")
	if err := typed.Set("state-dir", filepath.Join(file, "state")); err != nil {
		t.Fatal(err)
	}
	_, err := timestampFile(typed, zerolog.Nop())
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), "--state-dir") {
		t.Errorf("a --state-dir under a file: %v, want a usage error naming --state-dir", err)
	}
	t.Setenv("XDG_STATE_HOME", file)
	if stamp, err := timestampFile(groupContext("g", ""), zerolog.Nop()); stamp != "" || err != nil {
		t.Errorf("the default state directory under a file: %q, %v; want none, and no error", stamp, err)
	}

}

// A group name too long for a state file name keeps no state (it used to
// fail the membership check, and a fresh daemon then waited for ever).
func TestStateFileNameTooLong(t *testing.T) {
	state := t.TempDir()
	if got := stampOf(t, groupContext(strings.Repeat("g", maxFileName-stateNameSlack+1), state)); got != "" {
		t.Errorf("timestamp file %s for a name too long for its state files, want none", got)
	}
	if got := stampOf(t, groupContext(strings.Repeat("g", maxFileName-stateNameSlack), state)); got == "" {
		t.Error("no timestamp file for a name that fits")
	}
}

// onCommandLine tells a flag typed from one set by its variable or by the
// --config file: those may be meant for the host's daemons, and must not
// make a command refuse what its user never typed (the state directory,
// the multicast settings of a quorum node given --peers).
func TestOnCommandLine(t *testing.T) {
	config := filepath.Join(t.TempDir(), "mcnode.toml")
	if err := os.WriteFile(config, []byte("state-dir = \"/from/config\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		env  string
		want bool
	}{
		{[]string{"x", "--state-dir", "/typed"}, "", true},
		{[]string{"x"}, "", false},
		{[]string{"x"}, "/from/env", false},
		{[]string{"x", "--config", config}, "", false},
		{[]string{"x", "--config", config, "--state-dir", "/typed"}, "", true},
	} {
		t.Setenv("MCNODE_STATE_DIR", tc.env)
		if tc.env == "" {
			os.Unsetenv("MCNODE_STATE_DIR")
		}
		var got, ran bool
		cmd := withConfig(&cli.Command{Name: "x",
			Flags:  []cli.Flag{&cli.StringFlag{Name: "state-dir", EnvVars: []string{"MCNODE_STATE_DIR"}}},
			Action: func(c *cli.Context) error { got, ran = onCommandLine(c, "state-dir"), true; return nil }},
			func() map[string]bool { return map[string]bool{"state-dir": true} })
		app := &cli.App{Commands: []*cli.Command{cmd}}
		if err := app.Run(append([]string{"mcnode"}, tc.args...)); err != nil || !ran {
			t.Fatalf("%v: %v (ran %v)", tc.args, err, ran)
		}
		if got != tc.want {
			t.Errorf("%v with MCNODE_STATE_DIR=%q: on the command line %v, want %v", tc.args, tc.env, got, tc.want)
		}
	}
}

// Log lines carry milliseconds and durations their unit: the console showed
// every time as HH:MM:SS.000, and "kill_after=150" (black-box round).
func TestLogTimesAndDurations(t *testing.T) {
	var b strings.Builder
	log := zerolog.New(&b).With().Timestamp().Logger()
	log.Info().Dur("kill_after", 150*time.Millisecond).Msg("m")
	line := b.String()
	if !strings.Contains(line, `"kill_after":"150ms"`) {
		t.Errorf("a duration logged as %s", line)
	}
	if !regexp.MustCompile(`"time":"[0-9T:-]+\.[0-9]{3}`).MatchString(line) {
		t.Errorf("a time logged without milliseconds: %s", line)
	}
}

// main's "mcnode: " is not doubled by the package mcnode's own prefix.
func TestErrorsUnprefixed(t *testing.T) {
	err := fmt.Errorf("mcnode: links to the peers: %w", errors.New("x"))
	if got := unprefixed(err); got != "links to the peers: x" {
		t.Errorf("unprefixed: %q", got)
	}
}

// A --join-timeout shorter than twice --takeover-timeout is raised to that
// before founding a group, and says so (it was raised silently: a typed
// join-timeout = "100ms" founded after 1 s; black-box round), whether it
// came from the command line, the environment or the --config file; not
// for a command that founds no group (status, lock without --found), nor
// for the default.
func TestJoinTimeoutRaisedWarns(t *testing.T) {
	config := filepath.Join(t.TempDir(), "mcnode.toml")
	if err := os.WriteFile(config, []byte("join-timeout = \"100ms\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("MCNODE_JOIN_TIMEOUT")
	for _, tc := range []struct {
		args []string
		env  string
		want string // "" for no warning
	}{
		{[]string{"run", "--join-timeout", "100ms"}, "", "--join-timeout 100ms raised to 1s, twice --takeover-timeout 500ms"},
		{[]string{"run", "--takeover-timeout", "700ms", "--join-timeout", "1s"}, "", "--join-timeout 1s raised to 1.4s, twice --takeover-timeout 700ms"},
		{[]string{"run"}, "100ms", "--join-timeout 100ms raised to 1s"},
		{[]string{"run", "--config", config}, "", "--join-timeout 100ms raised to 1s"},
		{[]string{"lock", "--found", "--join-timeout", "100ms"}, "", "--join-timeout 100ms raised to 1s"},
		{[]string{"run", "--join-timeout", "1s"}, "", ""},
		{[]string{"run", "--join-timeout", "3s"}, "", ""},
		{[]string{"run"}, "", ""},
		// The default is the floor for the default --takeover-timeout only.
		{[]string{"run", "--takeover-timeout", "700ms"}, "", ""},
		{[]string{"lock", "--join-timeout", "100ms"}, "", ""},
		{[]string{"status", "--join-timeout", "100ms"}, "", ""},
	} {
		if tc.env != "" {
			t.Setenv("MCNODE_JOIN_TIMEOUT", tc.env)
		} else {
			os.Unsetenv("MCNODE_JOIN_TIMEOUT")
		}
		var logged strings.Builder
		app := newApp()
		for _, cmd := range app.Commands {
			cmd.Action = func(c *cli.Context) error {
				_, err := groupConfig(c, zerolog.New(&logged))
				return err
			}
		}
		args := append([]string{"mcnode", tc.args[0], "--interface", "lo", "--state-dir", "none"}, tc.args[1:]...)
		if err := app.Run(args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		switch out := logged.String(); {
		case tc.want == "" && out != "":
			t.Errorf("%v (MCNODE_JOIN_TIMEOUT=%q) logged %s; want nothing", tc.args, tc.env, out)
		case tc.want != "" && (!strings.Contains(out, tc.want) || !strings.Contains(out, `"level":"warn"`)):
			t.Errorf("%v (MCNODE_JOIN_TIMEOUT=%q) logged %q; want a warning with %q", tc.args, tc.env, out, tc.want)
		}
	}
}
