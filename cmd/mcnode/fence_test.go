package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fenceRun runs mcnode with args and checks its status and whole output.
// The tests spell the statuses out: they are the documented interface.
func fenceRun(t *testing.T, wantCode int, wantOut string, args ...string) {
	t.Helper()
	out, code := mcnodeLocal(args...)
	if code != wantCode || out != wantOut {
		t.Fatalf("mcnode %s: status %d, output %q; want status %d, output %q",
			strings.Join(args, " "), code, out, wantCode, wantOut)
	}
}

func TestFenceCheckAcceptsAndRefuses(t *testing.T) {
	f := filepath.Join(t.TempDir(), "fence")
	fenceRun(t, 0, "0\n", "fence", "show", f) // no file yet
	fenceRun(t, 0, "", "fence", "check", f, "57")
	fenceRun(t, 0, "", "fence", "check", f, "57") // the same holder again
	fenceRun(t, 1, "mcnode: fence: token 41 is stale: 57 already seen in "+f+"\n", "fence", "check", f, "41")
	fenceRun(t, 0, "57\n", "fence", "show", f)
	fenceRun(t, 0, "", "fence", "check", f, "58")
	fenceRun(t, 0, "58\n", "fence", "show", f)
	fi, err := os.Stat(f)
	if err != nil || fi.Mode() != 0o600 {
		t.Fatalf("fence file: %v, %v; want mode -rw-------", fi, err)
	}
}

// Bad arguments give one line naming the problem, status 2, and leave the
// file alone.
func TestFenceUsageErrors(t *testing.T) {
	f := filepath.Join(t.TempDir(), "fence")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"fence"}, "usage: mcnode fence check FILE TOKEN"},
		{[]string{"fence", "lock"}, `unknown fence command "lock"`},
		{[]string{"fence", "check"}, "usage: mcnode fence check FILE TOKEN"},
		{[]string{"fence", "check", f}, "usage: mcnode fence check FILE TOKEN"},
		{[]string{"fence", "check", f, "1", "2"}, "usage: mcnode fence check FILE TOKEN"},
		{[]string{"fence", "check", f, ""}, `TOKEN "": want a fencing token`}, // an unset $MCNODE_TOKEN
		{[]string{"fence", "check", f, "0"}, `TOKEN "0": want a fencing token`},
		{[]string{"fence", "check", "--", f, "-1"}, `TOKEN "-1": want a fencing token`},
		{[]string{"fence", "check", f, "12x"}, `TOKEN "12x": want a fencing token`},
		{[]string{"fence", "check", f, "18446744073709551616"}, `TOKEN "18446744073709551616": want a fencing token, an integer from 1 to 18446744073709551615`},
		{[]string{"fence", "check", "", "1"}, "FILE is empty"},
		{[]string{"fence", "check", "--force", f, "1"}, "flag provided but not defined: -force (see mcnode fence check --help)"},
		{[]string{"fence", "show"}, "usage: mcnode fence show FILE"},
		{[]string{"fence", "show", f, f}, "usage: mcnode fence show FILE"},
	} {
		out, code := mcnodeLocal(tc.args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("mcnode %q: status %d, output %q; want status 2 and one line with %q", tc.args, code, out, tc.want)
		}
	}
	if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a usage error touched the fence file (stat: %v)", err)
	}
}

// A file that is not a fence record, or cannot be opened, is status 4, not
// "stale" and not "no token seen".
func TestFenceCorruptFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "fence")
	const junk = "57\n" // a number, but not the fixed-width record
	if err := os.WriteFile(f, []byte(junk), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "mcnode: fence: " + f + ` is corrupt: want 20 digits and a newline, found "57\n"` + "\n"
	fenceRun(t, 4, want, "fence", "check", f, "100")
	fenceRun(t, 4, want, "fence", "show", f)
	if b, err := os.ReadFile(f); err != nil || string(b) != junk {
		t.Fatalf("the corrupt file now holds %q (%v)", b, err)
	}
	missing := filepath.Join(dir, "no-such-dir", "fence") // a mistyped path
	if out, code := mcnodeLocal("fence", "show", missing); code != 4 || !strings.Contains(out, filepath.Dir(missing)) {
		t.Fatalf("fence show in a missing directory: status %d, output %q; want status 4 naming it", code, out)
	}
	out, code := mcnodeLocal("fence", "check", dir, "1") // a directory
	if code != 4 || !strings.Contains(out, dir) {
		t.Fatalf("fence check on a directory: status %d, output %q; want status 4 naming it", code, out)
	}
}

func TestFenceHelp(t *testing.T) {
	out, code := mcnodeLocal("--help")
	if code != 0 || !strings.Contains(out, "fence") {
		t.Fatalf("--help (status %d) does not list fence:\n%s", code, out)
	}
	for _, args := range [][]string{{"fence", "--help"}, {"fence", "check", "--help"}} {
		out, code := mcnodeLocal(args...)
		for _, want := range []string{
			`mcnode lock db -- sh -c 'mcnode fence check /srv/db/fence "$MCNODE_TOKEN" && ./write-db.sh'`,
			"Exit status: 0 if TOKEN is accepted",
			"1 if it is stale",
			"2 for usage errors",
			"4 if FILE cannot be read or written",
		} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("mcnode %s (status %d) does not say %q:\n%s", strings.Join(args, " "), code, want, out)
			}
		}
	}
}
