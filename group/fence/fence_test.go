package fence

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary doubles as the child processes of
// TestFenceConcurrentProcesses: with FENCE_TEST_FILE set it hammers that
// file and prints what happened instead of running the tests.
func TestMain(m *testing.M) {
	if path := os.Getenv("FENCE_TEST_FILE"); path != "" {
		os.Exit(child(path))
	}
	os.Exit(m.Run())
}

// record is the file's content for token t.
func record(t uint64) string { return fmt.Sprintf("%020d\n", t) }

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustCheck(t *testing.T, path string, token uint64) {
	t.Helper()
	if err := Check(path, token); err != nil {
		t.Fatalf("Check(%d): %v", token, err)
	}
}

func mustHighest(t *testing.T, path string, want uint64) {
	t.Helper()
	if h, err := Highest(path); err != nil || h != want {
		t.Fatalf("Highest = %d, %v; want %d", h, err, want)
	}
}

func TestFenceStaleRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence")
	mustCheck(t, path, 57)
	before := readFile(t, path)
	err := Check(path, 41)
	if !errors.Is(err, ErrStale) {
		t.Fatalf("Check(41) after 57: %v; want ErrStale", err)
	}
	if want := "fence: token 41 is stale: 57 already seen in " + path; err.Error() != want {
		t.Errorf("error %q; want %q", err, want)
	}
	if after := readFile(t, path); after != before || after != record(57) {
		t.Errorf("a refused check changed the file: %q, then %q", before, after)
	}
	mustHighest(t, path, 57)
}

func TestFenceEqualAccepted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence")
	mustCheck(t, path, 57)
	mustCheck(t, path, 57) // the same holder writing twice
	mustHighest(t, path, 57)
}

func TestFenceHigherRecorded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence")
	mustCheck(t, path, 57)
	mustCheck(t, path, 58)
	if got := readFile(t, path); got != record(58) {
		t.Fatalf("file holds %q; want %q", got, record(58))
	}
	mustHighest(t, path, 58)
	mustCheck(t, path, math.MaxUint64) // the widest token fits the record
	mustHighest(t, path, math.MaxUint64)
	if err := Check(path, math.MaxUint64-1); !errors.Is(err, ErrStale) {
		t.Fatalf("Check(max-1) after max: %v; want ErrStale", err)
	}
}

// The record is rewritten in place: the file stays the same inode, which
// is what the flock is on.
func TestFenceWritesInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence")
	mustCheck(t, path, 1)
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	mustCheck(t, path, 2)
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Fatal("Check replaced the file instead of writing it in place")
	}
}

func TestFenceMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence")
	mustHighest(t, path, 0)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Highest created the file (stat: %v)", err)
	}
	// An empty file is what Check leaves if it dies between creating the
	// file and writing the first record: nothing was ever accepted.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mustHighest(t, path, 0)
	mustCheck(t, path, 3)
	mustHighest(t, path, 3)
}

// A missing directory is an error, as it is for Check: 0 would hide a
// mistyped path.
func TestFenceMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-dir", "fence")
	if h, err := Highest(path); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Highest in a missing directory = %d, %v; want an error wrapping os.ErrNotExist", h, err)
	}
	if err := Check(path, 1); err == nil {
		t.Fatal("Check in a missing directory succeeded")
	}
}

func TestFenceCorruptRefused(t *testing.T) {
	for _, content := range []string{
		"57\n",                     // not fixed-width
		"00000000000000000057",     // no newline
		"00000000000000000057\n\n", // trailing bytes
		"0000000000000000005x\n",
		"+0000000000000000057\n",
		"99999999999999999999\n", // overflows uint64
		"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
		"hello, world",
	} {
		path := filepath.Join(t.TempDir(), "fence")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		err := Check(path, 100)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Errorf("Check on %q: %v; want ErrCorrupt naming %s", content, err, path)
		}
		if got := readFile(t, path); got != content {
			t.Errorf("Check on %q changed the file to %q", content, got)
		}
		if h, err := Highest(path); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Highest on %q: %d, %v; want ErrCorrupt", content, h, err)
		}
	}
}

func TestFenceTokenZeroRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence")
	if err := Check(path, 0); !errors.Is(err, ErrBadToken) {
		t.Fatalf("Check(0): %v; want ErrBadToken", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Check(0) touched the file (stat: %v)", err)
	}
}

func TestFenceCreatesMode0600(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence")
	mustCheck(t, path, 1)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o600 {
		t.Fatalf("mode %v; want -rw-------", fi.Mode())
	}
}

func TestFenceIOError(t *testing.T) {
	dir := t.TempDir()
	err := Check(dir, 1) // a directory cannot be opened for writing
	if err == nil || errors.Is(err, ErrStale) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Check on a directory: %v; want an I/O error naming it", err)
	}
}

// op is one Check and what came of it, then what Highest said right after.
// The times are CLOCK_MONOTONIC readings, which every process on the host
// shares: Start just before Check, End just after it returned (and before
// Highest), SeenEnd after Highest returned.
type op struct {
	Token      uint64
	Accepted   bool
	Seen       uint64
	Start, End int64
	SeenEnd    int64
}

func monotonic() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// hammer runs workers goroutines, each making n checks on path and reading
// Highest after each. A token is the clock in microseconds less a random
// delay of up to 100 µs, like a grant's timestamp reaching the resource
// late: so tokens climb but arrive out of order, and many checks are
// accepted, many refused.
func hammer(path string, workers, n int, seed uint64) ([]op, error) {
	ops := make([][]op, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for range n {
				o := op{Start: monotonic()}
				o.Token = uint64(o.Start/1000 - rng.Int64N(100))
				err := Check(path, o.Token)
				o.End = monotonic()
				if err != nil && !errors.Is(err, ErrStale) {
					errs[w] = err
					return
				}
				o.Accepted = err == nil
				if o.Seen, err = Highest(path); err != nil {
					errs[w] = err
					return
				}
				o.SeenEnd = monotonic()
				ops[w] = append(ops[w], o)
			}
		})
	}
	wg.Wait()
	var all []op
	for _, o := range ops {
		all = append(all, o...)
	}
	return all, errors.Join(errs...)
}

// checkHistory tests a concurrent history against the rule, using only what
// real time proves about the order in which the flock let the calls in (x
// went before y for sure if x returned before y started):
//   - an accepted token is at least every token accepted by a check that
//     returned before it started;
//   - a refused token is below some token accepted by a check that started
//     before it returned (one that may have gone first);
//   - the highest never goes down: a check's token (accepted) or a higher
//     one (refused) is seen right after it, and a Highest that returned
//     before another started saw no more than it;
//   - only accepted tokens are ever recorded, and the file ends up holding
//     the largest.
func checkHistory(t *testing.T, path string, ops []op) {
	t.Helper()
	var highest uint64
	accepted := map[uint64]bool{}
	for _, o := range ops {
		if o.Accepted {
			accepted[o.Token] = true
			highest = max(highest, o.Token)
		}
	}
	var refused, violations int
	errorf := func(format string, args ...any) {
		if violations++; violations <= 10 { // the first few tell the story
			t.Errorf(format, args...)
		}
	}
	for _, b := range ops {
		switch {
		case b.Accepted && b.Seen < b.Token:
			errorf("token %d was accepted, but Highest then said %d", b.Token, b.Seen)
		case !b.Accepted && b.Seen <= b.Token:
			errorf("token %d was refused, but Highest then said %d", b.Token, b.Seen)
		case !accepted[b.Seen]:
			errorf("Highest said %d, a token never accepted", b.Seen)
		}
		for _, a := range ops {
			if a.SeenEnd < b.End && a.Seen > b.Seen {
				errorf("the highest went down from %d to %d", a.Seen, b.Seen)
			}
		}
		if !b.Accepted {
			refused++
			if !slices.ContainsFunc(ops, func(a op) bool { return a.Accepted && a.Token > b.Token && a.Start <= b.End }) {
				errorf("token %d was refused, but no higher token was accepted before it", b.Token)
			}
			continue
		}
		for _, a := range ops {
			if a.Accepted && a.End < b.Start && a.Token > b.Token {
				errorf("token %d was accepted after %d had been", b.Token, a.Token)
			}
		}
	}
	if violations > 0 {
		t.Fatalf("%d violations in %d checks", violations, len(ops))
	}
	mustHighest(t, path, highest)
	// Both outcomes must have happened, or the history tests little.
	if len(accepted) == 0 || refused == 0 {
		t.Fatalf("%d checks accepted, %d refused; want some of each", len(ops)-refused, refused)
	}
	t.Logf("%d checks: %d accepted, %d refused; highest %d", len(ops), len(ops)-refused, refused, highest)
}

func TestFenceConcurrentGoroutines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence")
	ops, err := hammer(path, 16, 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkHistory(t, path, ops)
}

// Processes, unlike goroutines, share no memory: only the flock keeps them
// apart.
func TestFenceConcurrentProcesses(t *testing.T) {
	const procs = 6
	path := filepath.Join(t.TempDir(), "fence")
	cmds := make([]*exec.Cmd, procs)
	outs := make([]*bytes.Buffer, procs)
	gates := make([]io.Closer, procs)
	for i := range cmds {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "FENCE_TEST_FILE="+path, "FENCE_TEST_SEED="+strconv.Itoa(i),
			"GORACE=atexit_sleep_ms=0") // a -race build otherwise sleeps a second at exit
		outs[i] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[i], os.Stderr
		gate, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i], gates[i] = cmd, gate
	}
	// Every child waits for its stdin to close, so all start together.
	for _, g := range gates {
		g.Close()
	}
	var ops []op
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		sc := bufio.NewScanner(outs[i])
		for sc.Scan() {
			var o op
			if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
				t.Fatalf("child %d printed %q: %v", i, sc.Text(), err)
			}
			ops = append(ops, o)
		}
	}
	if want := procs * 4 * 60; len(ops) != want {
		t.Fatalf("children reported %d checks; want %d", len(ops), want)
	}
	checkHistory(t, path, ops)
}

// child is one process of TestFenceConcurrentProcesses: it waits for the
// parent to close its stdin, hammers path, and prints one JSON op a line.
func child(path string) int {
	seed, _ := strconv.ParseUint(os.Getenv("FENCE_TEST_SEED"), 10, 64)
	_, _ = io.Copy(io.Discard, os.Stdin)
	ops, err := hammer(path, 4, 60, 100+seed)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	enc := json.NewEncoder(os.Stdout)
	for _, o := range ops {
		if err := enc.Encode(o); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}
