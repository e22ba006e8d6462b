package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestPrivateDir: the control socket's directory is trusted only where no
// other user can have put a socket.
func TestPrivateDir(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("skipped: the cases need directories owned by other users; run as root")
	}
	base := t.TempDir() // owned by root, 0700
	mk := func(name string, mode os.FileMode, uid int) string {
		t.Helper()
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := mk("own", 0o700, 0)
	service := mk("service", 0o750, 4242) // like /run/mcnode: another user's, under a root-only directory
	open := mk("open", 0o777, 0)
	shared := mk("shared", 0o1777, 0) // like /tmp
	planted := filepath.Join(shared, "planted")
	if err := os.Mkdir(planted, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(planted, 4242, 4242); err != nil { // another user's, in /tmp
		t.Fatal(err)
	}
	groupWritable := mk("gw", 0o770, 4242)
	for dir, ok := range map[string]bool{own: true, service: true, open: false, planted: false, groupWritable: false, filepath.Join(base, "missing"): false} {
		err := privateDir(dir)
		if (err == nil) != ok {
			t.Errorf("privateDir(%s) = %v, want ok=%v", filepath.Base(dir), err, ok)
		}
		if err != nil && !ok && filepath.Base(dir) != "missing" && !errors.Is(err, errUnsafeSocketDir) {
			t.Errorf("privateDir(%s) = %v, want errUnsafeSocketDir", filepath.Base(dir), err)
		}
	}
}
