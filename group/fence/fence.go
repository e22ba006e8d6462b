package fence

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Errors that Check and Highest wrap; test for them with errors.Is.
var (
	// ErrStale means a higher token than the one checked was already seen:
	// the lock has passed to a newer holder since this token was granted.
	ErrStale = errors.New("fence: stale token")
	// ErrBadToken means the token is 0, which no lock grants (tokens start
	// at 1), so it can only be a caller's mistake such as an unset variable.
	ErrBadToken = errors.New("fence: bad token")
	// ErrCorrupt means the file does not hold a fence record. It is never
	// read as 0: that would let any stale holder through.
	ErrCorrupt = errors.New("fence: corrupt file")
)

// The record is the token in decimal, zero-padded to the 20 digits of the
// largest uint64, and a newline: "00000000000000000057\n".
const (
	digits    = 20
	recordLen = digits + 1
)

// fenceError is an error with its own message that still matches its
// sentinel under errors.Is.
type fenceError struct {
	sentinel error
	msg      string
}

func (e *fenceError) Error() string { return e.msg }
func (e *fenceError) Unwrap() error { return e.sentinel }

// Check accepts token if it is at least the highest token recorded in the
// file at path, and records it; it returns an error wrapping ErrStale, and
// changes nothing, if a higher token was already recorded. The file is
// created with mode 0600 if missing. Token 0 is an error wrapping
// ErrBadToken. When Check returns nil the new highest is on disk (fsynced).
//
// Each call opens the file and holds an exclusive flock on it from the read
// to the fsync, so concurrent calls from goroutines (each with its own open
// file) and from other processes are serialized. The lock is released when
// Check returns: to keep another write from slipping in between the check
// and your write, call Check under the lock that serializes those writes.
func Check(path string, token uint64) (err error) {
	if token == 0 {
		return &fenceError{ErrBadToken, "fence: token 0 is not a fencing token (tokens start at 1)"}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	defer func() {
		// Closing releases the flock. A close error after a successful
		// fsync is still reported: the caller must not assume more than
		// the file system promises.
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("fence: %w", cerr)
		}
	}()
	if err := lock(f, syscall.LOCK_EX); err != nil {
		return err
	}
	highest, empty, err := read(f, path)
	if err != nil {
		return err
	}
	if token < highest {
		return &fenceError{ErrStale, fmt.Sprintf("fence: token %d is stale: %d already seen in %s", token, highest, path)}
	}
	// Write the record in place, at offset 0, in one write call, and never
	// truncate. The record has a fixed width, so once the first one is on
	// disk the file's length never changes again, and a crash leaves either
	// the old record or the new one: the 21 bytes lie within the first disk
	// sector and the first page, which the disk and the page cache each
	// write as a whole. It can never leave the file empty or half-written
	// (truncate-then-write could leave it empty, which would read as
	// "nothing seen" and let a stale holder through).
	//
	// Never write a temporary file and rename it over path: the flock is on
	// the inode, not the name, so a caller already waiting on the old inode
	// would get its lock while another locks the new one, and both would
	// read, decide and write at once.
	//
	// An equal token is written too, so that a record some earlier caller
	// wrote but did not get to fsync (it crashed) is made durable before
	// this caller is told to go ahead.
	rec := fmt.Appendf(make([]byte, 0, recordLen), "%0*d\n", digits, token)
	if _, err := f.WriteAt(rec, 0); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	if empty {
		// The first record: make the file's directory entry durable too,
		// or a crash could lose the whole file and with it every token seen.
		if err := syncDir(filepath.Dir(path)); err != nil {
			return err
		}
	}
	return nil
}

// Highest returns the highest token recorded in the file at path, or 0 if
// the file does not exist or holds no record yet. A file that holds
// something other than a record is an error wrapping ErrCorrupt. A missing
// directory is an error, as for Check: no token can have been recorded
// there, and 0 would hide a mistyped path.
func Highest(path string) (uint64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		if _, derr := os.Stat(filepath.Dir(path)); derr != nil {
			return 0, fmt.Errorf("fence: %s: no token can have been recorded there: %w", path, derr)
		}
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fence: %w", err)
	}
	defer f.Close()
	// A shared lock waits out a Check in progress, so the record read is
	// one Check finished writing.
	if err := lock(f, syscall.LOCK_SH); err != nil {
		return 0, err
	}
	h, _, err := read(f, path)
	return h, err
}

// lock takes a flock on f, retrying if a signal interrupts the wait.
func lock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			if err != nil {
				return fmt.Errorf("fence: %w", &os.PathError{Op: "flock", Path: f.Name(), Err: err})
			}
			return nil
		}
	}
}

// read returns the token recorded in f, and whether f is empty. An empty
// file is what Check leaves between creating the file and writing its first
// record (or a crash there), so it means nothing was recorded: no caller
// was told to go ahead before a record was on disk.
func read(f *os.File, path string) (token uint64, empty bool, err error) {
	// One byte more than a record, to tell a record from a longer file.
	buf := make([]byte, recordLen+1)
	n, err := f.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		return 0, false, fmt.Errorf("fence: %w", err)
	}
	buf = buf[:n]
	if n == 0 {
		return 0, true, nil
	}
	// ParseUint in base 10 takes digits only: no sign, space or underscore.
	if n == recordLen && buf[digits] == '\n' {
		if t, err := strconv.ParseUint(string(buf[:digits]), 10, 64); err == nil {
			return t, false, nil
		}
	}
	found := fmt.Sprintf("%q", buf)
	if n > recordLen {
		found = fmt.Sprintf("%q...", buf[:recordLen])
	}
	return 0, false, &fenceError{ErrCorrupt, fmt.Sprintf("fence: %s is corrupt: want %d digits and a newline, found %s", path, digits, found)}
}

// syncDir fsyncs a directory, making the entries created in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	return nil
}
