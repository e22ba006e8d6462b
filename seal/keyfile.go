package seal

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LoadKeyFile reads a key file: one key per line as `mcnode keygen` writes
// it, the first being the one to seal with; blank lines and lines starting
// with # are skipped. The file must be readable by its owner alone (mode
// 0600 or stricter): a group key that others on the host can read protects
// nothing. One exception: a read-only file in the service's credentials
// directory ($CREDENTIALS_DIRECTORY, systemd's LoadCredential), which
// systemd gives the service's user with an access list, so that its group
// bits show the list's mask (0440); nobody else can reach that directory.
//
// A pipe is taken (--keyfile <(...)); a directory is not.
func LoadKeyFile(path string) ([]Key, error) { return loadKeyFile(path, false) }

// LoadRegularKeyFile is LoadKeyFile for a path someone else named (a member
// that asks this one to install a key): it takes a regular file only, and
// never waits, as opening a FIFO would wait for a writer for ever.
func LoadRegularKeyFile(path string) ([]Key, error) { return loadKeyFile(path, true) }

func loadKeyFile(path string, regularOnly bool) ([]Key, error) {
	fail := func(err error) ([]Key, error) { return nil, fmt.Errorf("seal: key file: %w", err) }
	flag := os.O_RDONLY
	if regularOnly {
		// The first check keeps the open away from devices; the second,
		// on what was opened, holds should the path be replaced between.
		if info, err := os.Stat(path); err != nil {
			return fail(err)
		} else if err := regular(path, info); err != nil {
			return nil, err
		}
		flag |= syscall.O_NONBLOCK
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	info, err := f.Stat()
	switch {
	case err != nil:
		return fail(err)
	case info.IsDir():
		return nil, fmt.Errorf("seal: key file %s is a directory", path)
	case regularOnly:
		if err := regular(path, info); err != nil {
			return nil, err
		}
		if err := syscall.SetNonblock(int(f.Fd()), false); err != nil {
			return fail(err)
		}
	}
	return readKeyFile(f, path, info)
}

// readKeyFile checks an open key file's mode and owner, and reads its keys.
func readKeyFile(f *os.File, path string, info os.FileInfo) ([]Key, error) {
	if perm := info.Mode().Perm(); perm&0o007 != 0 || perm&0o070 != 0 && !(credential(path) && perm&0o222 == 0) {
		return nil, fmt.Errorf("seal: key file %s has mode %04o: %s; chmod 600 %s", path, perm, whoElse(perm), path)
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid != uint32(os.Getuid()) && st.Uid != 0 {
		return nil, fmt.Errorf("seal: key file %s belongs to user %d, neither this user (%d) nor root: whoever owns it can change the group key", path, st.Uid, os.Getuid())
	}
	var keys []Key
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		k, err := ParseKey(s)
		if err != nil {
			return nil, fmt.Errorf("seal: key file %s, line %d: %w", path, line, err)
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("seal: key file %s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("seal: key file %s holds no key (make one with mcnode keygen)", path)
	}
	return keys, nil
}

// WriteKeyFile creates a key file holding keys, the first the one to seal
// with, readable by its owner alone. It refuses to replace an existing file.
func WriteKeyFile(path string, keys ...Key) error {
	if len(keys) == 0 {
		return errors.New("seal: no key to write")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("seal: key file: %w", err)
	}
	return writeKeys(f, keys)
}

// writeKeys writes keys to f, syncs and closes it.
func writeKeys(f *os.File, keys []Key) error {
	var b strings.Builder
	b.WriteString("# mcnode group key: every member of the group needs this file; keep it secret\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s\n", k.Encode())
	}
	_, err := f.WriteString(b.String())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("seal: key file: %w", err)
	}
	return nil
}

// ReplaceKeyFile writes keys to path (the first the one to seal with),
// replacing the file atomically: a new file beside it, readable by its
// owner alone, renamed over the old one, so that a crash leaves the old
// keys or the new ones, never half of either.
func ReplaceKeyFile(path string, keys ...Key) error {
	if len(keys) == 0 {
		return errors.New("seal: no key to write")
	}
	// A temporary file of its own, in the same directory (the rename stays
	// on one file system), so that two replacements at once do not write
	// one file.
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.new")
	if err != nil {
		return fmt.Errorf("seal: key file: %w", err)
	}
	tmp := f.Name()
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("seal: key file: %w", err)
	}
	if err := writeKeys(f, keys); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("seal: key file: %w", err)
	}
	return nil
}

// ParseID reads a key ID as key listings show it (8 hex digits).
func ParseID(s string) (uint32, error) {
	id, err := strconv.ParseUint(strings.TrimSpace(s), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("seal: key ID %q is not 8 hex digits (see mcnode keys list)", s)
	}
	return uint32(id), nil
}

// credential reports whether path is a file of the credentials directory
// systemd made for this service.
func credential(path string) bool {
	dir := os.Getenv("CREDENTIALS_DIRECTORY")
	if dir == "" {
		return false
	}
	abs, err := filepath.Abs(path)
	return err == nil && filepath.Dir(abs) == filepath.Clean(dir)
}

// regular refuses a key file that is not a regular file.
func regular(path string, info os.FileInfo) error {
	switch {
	case info.IsDir():
		return fmt.Errorf("seal: key file %s is a directory", path)
	case !info.Mode().IsRegular():
		kind := "a device"
		switch t := info.Mode().Type(); {
		case t&os.ModeNamedPipe != 0:
			kind = "a named pipe"
		case t&os.ModeSocket != 0:
			kind = "a socket"
		}
		return fmt.Errorf("seal: key file %s is not a regular file but %s", path, kind)
	}
	return nil
}

// whoElse says what a key file's mode lets users other than its owner do
// with it.
func whoElse(perm os.FileMode) string {
	var can []string
	for _, c := range []struct {
		bits os.FileMode
		what string
	}{{0o044, "read"}, {0o022, "change"}, {0o011, "run"}} {
		if perm&c.bits != 0 {
			can = append(can, c.what)
		}
	}
	if len(can) > 1 {
		can = []string{strings.Join(can[:len(can)-1], ", ") + " and " + can[len(can)-1]}
	}
	return "others can " + strings.Join(can, "") + " it"
}
