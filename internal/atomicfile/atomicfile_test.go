package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// Write replaces a file whole, with mode 0600, and leaves no temporary
// file; a write that cannot happen leaves the old content.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "g.member")
	for _, body := range []string{"first\n", "second, longer\n", ""} {
		if err := Write(path, []byte(body)); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != body {
			t.Fatalf("after writing %q the file holds %q (%v)", body, b, err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if err := Write(path, []byte("kept\n")); err != nil {
		t.Fatal(err)
	}
	// A path whose directory is a file: the write fails, and nothing changes.
	if err := Write(filepath.Join(path, "x"), []byte("no")); err == nil {
		t.Error("a write under a file succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files left in the directory: %v, want g.member alone", entries)
	}
	if b, _ := os.ReadFile(path); string(b) != "kept\n" {
		t.Errorf("the file holds %q after a failed write elsewhere", b)
	}
}
