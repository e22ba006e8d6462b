package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// runWith runs the app with the run command's action replaced by one that
// records the settings it got.
func runWith(t *testing.T, env map[string]string, args ...string) (map[string]string, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	app := newApp()
	got := map[string]string{}
	for _, cmd := range app.Commands {
		if cmd.Name == "run" {
			cmd.Action = func(c *cli.Context) error {
				for _, name := range []string{"group", "interface", "metrics-addr", "keyfile"} {
					got[name] = c.String(name)
				}
				got["ttl"] = strconv.Itoa(c.Int("ttl"))
				got["lease"] = c.Duration("lease").String()
				return nil
			}
		}
	}
	return got, app.Run(append([]string{"mcnode", "run"}, args...))
}

// TestConfigFile: settings come from the file, and a flag or an environment
// variable wins over it; a setting nobody knows is refused.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mcnode.toml")
	conf := "group = \"fromfile\"\ninterface = \"eth7\"\nttl = 4\nlease = \"2s\"\nmetrics-addr = \"127.0.0.1:1\"\nnodes = 9 # a demo setting: left alone by run\n"
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := runWith(t, map[string]string{"MCNODE_LEASE": "7s"}, "--config", file, "--ttl", "3")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"group": "fromfile", "interface": "eth7", "metrics-addr": "127.0.0.1:1", "ttl": "3", "lease": "7s", "keyfile": ""}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (file, then env and flags winning)", k, got[k], v)
		}
	}
	if err := os.WriteFile(file, []byte("grup = \"typo\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := runWith(t, nil, "--config", file); err == nil || !strings.Contains(err.Error(), `unknown setting "grup"`) {
		t.Errorf("a typo in the file: %v", err)
	}
	missing := filepath.Join(dir, "missing.toml")
	if _, err := runWith(t, nil, "--config", missing); err == nil || !strings.Contains(err.Error(), "--config "+missing+": no such file") {
		t.Errorf("a missing file: %v", err)
	}
	// Errors name the file, and say what a duration looks like.
	for content, want := range map[string]string{
		"group = \n": "--config " + file + ": line 1",
		"tick = 5\n": `a duration is a string: "10ms"`,
	} {
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := runWith(t, nil, "--config", file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a file holding %q: %v, want %q", content, err, want)
		}
	}
}

// TestDocsExamples: docs/mcnode.toml loads with every setting known, and
// docs/mcnode.service sets only environment variables mcnode reads, passes
// systemd-analyze verify and stays hardened.
func TestDocsExamples(t *testing.T) {
	got, err := runWith(t, nil, "--config", "../../docs/mcnode.toml")
	if err != nil {
		t.Fatalf("docs/mcnode.toml: %v", err)
	}
	if got["group"] != "build-farm" || got["lease"] != (1500*time.Millisecond).String() {
		t.Errorf("docs/mcnode.toml gave %v", got)
	}
	unit, err := os.ReadFile("../../docs/mcnode.service")
	if err != nil {
		t.Fatal(err)
	}
	envs := map[string]bool{}
	var walk func([]*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, cmd := range cmds {
			for _, f := range cmd.Flags {
				if e, ok := f.(interface{ GetEnvVars() []string }); ok {
					for _, v := range e.GetEnvVars() {
						envs[v] = true
					}
				}
			}
			walk(cmd.Subcommands)
		}
	}
	walk(newApp().Commands)
	used := regexp.MustCompile(`MCNODE_[A-Z_]+`).FindAllString(string(unit), -1)
	if len(used) == 0 {
		t.Fatal("the unit sets no MCNODE_ variable: the check checks nothing")
	}
	for _, v := range used {
		if !envs[v] {
			t.Errorf("docs/mcnode.service uses %s, which no flag reads", v)
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("no systemd-analyze: the unit's syntax and hardening are not checked here")
		return
	}
	// The unit as installed, with this test binary standing for mcnode.
	path := filepath.Join(t.TempDir(), "mcnode.service")
	text := strings.ReplaceAll(string(unit), "/usr/local/bin/mcnode", os.Args[0])
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v: %s", err, out)
	}
	out, _ := exec.Command(analyze, "security", "--offline=yes", path).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for mcnode.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Logf("systemd-analyze security gave no exposure level here: %s", out)
		return
	}
	if level, _ := strconv.ParseFloat(string(m[1]), 64); level > 2 {
		t.Errorf("the unit's exposure level is %s, want at most 2 (it was 1.5)", m[1])
	}
}

// docs/mcnode.service does not restart mcnode run after a usage error,
// which would fail alike every RestartSec (black-box round), and restarts
// it after anything else: status 1 may pass (the group cannot be joined
// yet), and a Go crash, which would exit 2 like a usage error, dies by
// SIGABRT under GOTRACEBACK=crash.
func TestServiceRestartsAllButUsageErrors(t *testing.T) {
	unit, err := os.ReadFile("../../docs/mcnode.service")
	if err != nil {
		t.Fatal(err)
	}
	var prevent []string
	env := map[string]bool{}
	for _, line := range strings.Split(string(unit), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		switch {
		case !ok || strings.HasPrefix(k, "#"):
		case k == "RestartPreventExitStatus":
			prevent = append(prevent, strings.Fields(v)...)
		case k == "Environment":
			env[v] = true
		}
	}
	if !slices.Equal(prevent, []string{strconv.Itoa(exitUsage)}) {
		t.Errorf("RestartPreventExitStatus lists %v, want the usage error's status %d alone", prevent, exitUsage)
	}
	if slices.Contains(prevent, "2") && !env["GOTRACEBACK=crash"] {
		t.Error("status 2 is not restarted, and a Go crash exits 2: the unit needs Environment=GOTRACEBACK=crash")
	}
}
