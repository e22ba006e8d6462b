package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompletionBash loads `mcnode completion bash` in bash and completes
// as a user's Tab would: commands, flags, and nothing run after "--".
func TestCompletionBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("skipped: no bash")
	}
	dir := t.TempDir()
	// "mcnode" on PATH is this test binary, acting as mcnode.
	calls := filepath.Join(dir, "calls")
	wrapper := "#!/bin/sh\necho \"$*\" >> " + calls + "\nMCNODE_TEST_MAIN=1 exec " + os.Args[0] + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "mcnode"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "ran")
	complete := func(words ...string) string {
		script := `source <(mcnode completion bash)
COMP_WORDS=(` + strings.Join(quoteAll(words), " ") + `); COMP_CWORD=$((${#COMP_WORDS[@]}-1))
_mcnode_complete; echo "${COMPREPLY[*]}"`
		cmd := exec.Command(bash, "-c", script)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := complete("mcnode", "lo"); got != "lock" {
		t.Errorf("mcnode lo<Tab>: %q, want lock", got)
	}
	if got := complete("mcnode", "st"); got != "status" {
		t.Errorf("mcnode st<Tab>: %q, want status", got)
	}
	if got := complete("mcnode", "vers"); got != "version" {
		t.Errorf("mcnode vers<Tab>: %q, want version", got)
	}
	if got := complete("mcnode", "--vers"); got != "--version" {
		t.Errorf("mcnode --vers<Tab>: %q, want --version", got)
	}
	if got := complete("mcnode", "lock", "--nonb"); got != "--nonblock" {
		t.Errorf("mcnode lock --nonb<Tab>: %q, want --nonblock", got)
	}
	if got := complete("mcnode", "status", "--wa"); got != "--watch" {
		t.Errorf("mcnode status --wa<Tab>: %q, want --watch", got)
	}
	// After "--" comes the user's command: completing must not run mcnode
	// on the line (urfave/cli would run the command rather than complete).
	if err := os.Remove(calls); err != nil {
		t.Fatal(err)
	}
	for _, line := range [][]string{
		{"mcnode", "lock", "x", "--", "touch", marker, ""},
		{"mcnode", "lock", "x", "touch", "--"}, // completing "--" itself
		{"mcnode", "lock", "x", "--"},
	} {
		if got := complete(line...); got != "" {
			t.Errorf("completing %q: %q, want the shell's own", line, got)
		}
	}
	b, _ := os.ReadFile(calls)
	for _, call := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.Contains(call, "--generate-bash-completion") {
			t.Errorf("completing a line with -- ran mcnode %s", call)
		}
	}
	if !strings.Contains(string(b), "completion bash") {
		t.Errorf("the wrapper logged no call at all (%q): the check above checks nothing", b)
	}
}

func quoteAll(words []string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return out
}

func TestCompletionScripts(t *testing.T) {
	for shell, want := range map[string]string{"bash": "complete -o bashdefault", "zsh": "compdef _mcnode mcnode", "fish": "complete -c mcnode"} {
		cmd := exec.Command(os.Args[0], "completion", shell)
		cmd.Env = append(os.Environ(), "MCNODE_TEST_MAIN=1")
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("completion %s: %v, output without %q", shell, err, want)
		}
		if shell == "zsh" {
			if zsh, err := exec.LookPath("zsh"); err == nil {
				if out, err := exec.Command(zsh, "-n", "-c", string(out)).CombinedOutput(); err != nil {
					t.Errorf("zsh -n: %v: %s", err, out)
				}
			}
		}
	}
	cmd := exec.Command(os.Args[0], "completion", "powershell")
	cmd.Env = append(os.Environ(), "MCNODE_TEST_MAIN=1")
	if err := cmd.Run(); err == nil {
		t.Error("completion powershell succeeded")
	} else if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitUsage {
		t.Errorf("completion powershell: %v, want exit status %d", err, exitUsage)
	}
}
