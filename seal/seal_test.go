package seal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcnode/mcnode/wire"
)

func ring(t testing.TB, primary Key, others ...Key) *Ring {
	t.Helper()
	r, err := NewRing(primary, others...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustKey(t testing.TB) Key {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// datagram packs one message from incarnation inc, as a node sends it.
func datagram(t testing.TB, inc uint64) []byte {
	t.Helper()
	c, err := wire.NewCodec(wire.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	h := wire.Header{Group: wire.GroupID("g"), Instance: 7, From: 3, Inc: inc, T: 1234, Epoch: 2, LogEpoch: 2}
	d, err := c.Pack(h, []wire.Message{&wire.Release{Req: 9, Resource: "printer", Token: 1200}})
	if err != nil {
		t.Fatal(err)
	}
	return d[0]
}

func TestSealOpenRoundTrip(t *testing.T) {
	k := mustKey(t)
	sender, receiver := ring(t, k), ring(t, k)
	plain := datagram(t, 42)
	sealed, err := sender.Seal(nil, plain, Multicast, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(sealed) != len(plain)+Overhead {
		t.Errorf("sealed %d bytes, want %d", len(sealed), len(plain)+Overhead)
	}
	if bytes.Contains(sealed, []byte("printer")) {
		t.Error("the messages travel in the clear")
	}
	if _, err := wire.DecodeHeader(sealed); !errors.Is(err, wire.ErrSealed) {
		t.Errorf("a node without the key decodes the header: %v", err)
	}
	got, err := receiver.Open(sealed, Multicast)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, plain) {
		t.Fatal("opened datagram differs from the one sealed")
	}
}

// Every byte of a sealed datagram is authenticated: flipping any one makes
// it fail (or name a key the ring lacks), and the window does not move.
func TestSealTamperedDatagramsFail(t *testing.T) {
	k := mustKey(t)
	sealed, err := ring(t, k).Seal(nil, datagram(t, 42), Multicast, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range sealed {
		if i < 3 {
			continue // magic and version: not a sealed datagram of ours at all
		}
		r := ring(t, k)
		bad := bytes.Clone(sealed)
		bad[i] ^= 0x40
		if _, err := r.Open(bad, Multicast); err == nil {
			t.Fatalf("byte %d flipped: the datagram still opened", i)
		}
		if _, err := r.Open(sealed, Multicast); err != nil {
			t.Fatalf("byte %d flipped: the genuine datagram no longer opens: %v", i, err)
		}
	}
}

func TestSealRefusesUnsealedAndForeignKeys(t *testing.T) {
	r := ring(t, mustKey(t))
	if _, err := r.Open(datagram(t, 42), Multicast); !errors.Is(err, ErrUnsealed) {
		t.Errorf("unsealed datagram: %v, want ErrUnsealed", err)
	}
	other, err := ring(t, mustKey(t)).Seal(nil, datagram(t, 42), Multicast, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Open(other, Multicast); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("datagram of another key: %v, want ErrUnknownKey", err)
	}
	if _, err := r.Open(other[:wire.HeaderLen+Overhead-1], Multicast); !errors.Is(err, ErrShort) {
		t.Errorf("truncated datagram: %v, want ErrShort", err)
	}
}

// A datagram is taken once; datagrams that cross on the way are each taken
// once; one from further back than the window is refused; a forged
// datagram under a high sequence number does not move the window.
func TestSealReplayWindow(t *testing.T) {
	k := mustKey(t)
	sender, r := ring(t, k), ring(t, k)
	seal := func(seq uint64) []byte {
		d, err := sender.Seal(nil, datagram(t, 42), Multicast, seq)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	open := func(d []byte) error { _, err := r.Open(d, Multicast); return err }
	d1, d2, d3 := seal(1), seal(2), seal(3)
	for _, d := range [][]byte{d1, d3, d2} { // d2 and d3 cross on the way
		if err := open(d); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range [][]byte{d1, d2, d3} {
		if err := open(d); !errors.Is(err, ErrReplay) {
			t.Fatalf("replayed datagram: %v, want ErrReplay", err)
		}
	}
	forged := seal(1_000_000)
	forged[len(forged)-1] ^= 1
	if err := open(forged); !errors.Is(err, ErrBadMAC) {
		t.Fatalf("forged datagram: %v", err)
	}
	if err := open(seal(4)); err != nil {
		t.Fatalf("the forged sequence number moved the window: %v", err)
	}
	late := seal(5)
	if err := open(seal(5 + windowSize)); err != nil {
		t.Fatal(err)
	}
	if err := open(late); !errors.Is(err, ErrReplay) {
		t.Fatalf("a datagram from beyond the window: %v, want ErrReplay", err)
	}
	// Another incarnation has a window of its own.
	other, err := sender.Seal(nil, datagram(t, 43), Multicast, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := open(other); err != nil {
		t.Fatal(err)
	}
}

// The same sequence number under two incarnations is two nonces: the
// ciphertexts differ.
func TestSealNonceDependsOnIncarnation(t *testing.T) {
	r := ring(t, mustKey(t))
	a, _ := r.Seal(nil, datagram(t, 42), Multicast, 1)
	b, _ := r.Seal(nil, datagram(t, 43), Multicast, 1)
	if bytes.Equal(a[wire.HeaderLen+12:], b[wire.HeaderLen+12:]) {
		t.Fatal("two incarnations sealed the same bytes under the same nonce")
	}
}

// Rotation: a node that installed the new key takes datagrams under both;
// once it seals with the new key, a node that has not installed it yet
// refuses them, which is why the key is installed everywhere first.
func TestRingRotation(t *testing.T) {
	old, next := mustKey(t), mustKey(t)
	a, b := ring(t, old), ring(t, old)
	a.Install(next)
	if err := a.Use(next.ID()); err != nil {
		t.Fatal(err)
	}
	d, _ := a.Seal(nil, datagram(t, 42), Multicast, 1)
	if _, err := b.Open(d, Multicast); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("a node without the new key: %v", err)
	}
	b.Install(next)
	if _, err := b.Open(d, Multicast); err != nil {
		t.Fatal(err)
	}
	d, _ = b.Seal(nil, datagram(t, 43), Multicast, 1) // b still seals with the old key
	if _, err := a.Open(d, Multicast); err != nil {
		t.Fatalf("the old key, still installed, is refused: %v", err)
	}
	if err := a.Remove(next.ID()); err == nil {
		t.Error("the primary key was removed")
	}
	if err := a.Remove(old.ID()); err != nil {
		t.Fatal(err)
	}
	d, _ = b.Seal(nil, datagram(t, 43), Multicast, 2)
	if _, err := a.Open(d, Multicast); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("a removed key is still taken: %v", err)
	}
	if got := a.Keys(); len(got) != 1 || !Equal(got[0], next) {
		t.Errorf("keys after rotation: %d, want the new one alone", len(got))
	}
}

func TestParseKey(t *testing.T) {
	k := mustKey(t)
	got, err := ParseKey(k.Encode() + "\n")
	if err != nil || !Equal(got, k) {
		t.Fatalf("ParseKey(String()) = %v, %v", got.ID(), err)
	}
	for _, bad := range []string{"", "not base64!", "c2hvcnQ="} {
		if _, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}

// FuzzOpen: no input makes Open panic, and nothing that does not
// authenticate opens.
func FuzzOpen(f *testing.F) {
	k := Key{Secret: [KeySize]byte{1, 2, 3}}
	d, _ := ring(f, k).Seal(nil, datagram(f, 42), Multicast, 1)
	f.Add(d)
	f.Add(datagram(f, 42))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := ring(t, k)
		if out, err := r.Open(b, Multicast); err == nil && !bytes.Equal(b, d) {
			t.Fatalf("a datagram that was never sealed opened: %x", out)
		}
	})
}

func BenchmarkSealOpen(b *testing.B) {
	k := mustKey(b)
	sender, receiver := ring(b, k), ring(b, k)
	plain := datagram(b, 42)
	b.SetBytes(int64(len(plain)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		d, err := sender.Seal(nil, plain, Multicast, uint64(i+1))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := receiver.Open(d, Multicast); err != nil {
			b.Fatal(err)
		}
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	a, b := mustKey(t), mustKey(t)
	path := dir + "/key"
	if err := WriteKeyFile(path, a, b); err != nil {
		t.Fatal(err)
	}
	if err := WriteKeyFile(path, a); err == nil {
		t.Error("an existing key file was replaced")
	}
	keys, err := LoadKeyFile(path)
	if err != nil || len(keys) != 2 || !Equal(keys[0], a) || !Equal(keys[1], b) {
		t.Fatalf("LoadKeyFile = %d keys, %v", len(keys), err)
	}
	// Each refusal names what the mode lets others do.
	for mode, want := range map[os.FileMode]string{0o640: "others can read it", 0o604: "others can read it", 0o620: "others can change it", 0o602: "others can change it", 0o601: "others can run it", 0o666: "others can read and change it", 0o677: "others can read, change and run it"} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKeyFile(path); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("a key file of mode %04o: %v, want %q", mode, err, want)
		}
	}
	if _, err := LoadKeyFile(dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("a directory as key file: %v", err)
	}
	empty := dir + "/empty"
	if err := os.WriteFile(empty, []byte("# nothing\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyFile(empty); err == nil {
		t.Error("a key file without a key was taken")
	}
	bad := dir + "/bad"
	if err := os.WriteFile(bad, []byte(a.Encode()+"\nnot-a-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyFile(bad); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a bad line: %v", err)
	}
	// A path another member named: a regular file only, and a FIFO with no
	// writer refused at once, not waited on for ever. The key file itself
	// loads so too.
	if keys, err := LoadRegularKeyFile(bad); err == nil || !strings.Contains(err.Error(), "line 2") || keys != nil {
		t.Errorf("LoadRegularKeyFile of a bad line: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if keys, err := LoadRegularKeyFile(path); err != nil || len(keys) != 2 {
		t.Errorf("LoadRegularKeyFile of a key file: %d keys, %v", len(keys), err)
	}
	// A pipe from this process's caller (--keyfile <(...)) is taken.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if _, err := pw.WriteString(a.Encode() + "\n"); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if keys, err := LoadKeyFile(fmt.Sprintf("/proc/self/fd/%d", pr.Fd())); err != nil || len(keys) != 1 || !Equal(keys[0], a) {
		t.Errorf("a key file from a pipe: %d keys, %v", len(keys), err)
	}
	fifo := dir + "/fifo"
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := LoadRegularKeyFile(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file but a named pipe") {
			t.Errorf("a FIFO as key file: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("LoadRegularKeyFile still waits on a FIFO")
	}
}

// A datagram opens only where it was sent: one sent to one member does not
// open at another's address, nor as a multicast, and a multicast does not
// open as a direct datagram.
func TestSealBindsTheDestination(t *testing.T) {
	k := mustKey(t)
	toB, err := ring(t, k).Seal(nil, datagram(t, 42), "10.0.0.2:7000", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []string{"10.0.0.3:7000", Multicast} {
		if _, err := ring(t, k).Open(toB, at); !errors.Is(err, ErrBadMAC) {
			t.Errorf("a datagram for 10.0.0.2:7000 opened at %q: %v", at, err)
		}
	}
	if _, err := ring(t, k).Open(toB, "10.0.0.2:7000"); err != nil {
		t.Fatal(err)
	}
	all, _ := ring(t, k).Seal(nil, datagram(t, 42), Multicast, 2)
	if _, err := ring(t, k).Open(all, "10.0.0.2:7000"); !errors.Is(err, ErrBadMAC) {
		t.Errorf("a multicast opened as a direct datagram: %v", err)
	}
}

// A receiver takes nothing older than the first datagram it took from a
// sender by one way (what came before may be a replay), and a sender's
// multicast and direct datagrams keep separate windows, so that the
// datagrams it sends to others in between do not push one out of the other.
func TestSealWindowStartsAtTheFirstDatagram(t *testing.T) {
	k := mustKey(t)
	sender, r := ring(t, k), ring(t, k)
	direct := func(seq uint64) []byte {
		d, _ := sender.Seal(nil, datagram(t, 42), "me:1", seq)
		return d
	}
	multi := func(seq uint64) []byte {
		d, _ := sender.Seal(nil, datagram(t, 42), Multicast, seq)
		return d
	}
	if _, err := r.Open(multi(5000), Multicast); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Open(multi(4999), Multicast); !errors.Is(err, ErrReplay) {
		t.Errorf("a datagram from before the first one taken: %v", err)
	}
	if _, err := r.Open(direct(2), "me:1"); err != nil {
		t.Errorf("a direct datagram far behind the multicast ones: %v", err)
	}
	if _, err := r.Open(multi(5001), Multicast); err != nil {
		t.Fatal(err)
	}
}

// Windows are forgotten least recently used first: a sender that keeps
// talking keeps its window however many others come and go.
func TestSealWindowEvictionKeepsTheLiveSender(t *testing.T) {
	k := mustKey(t)
	sender, r := ring(t, k), ring(t, k)
	live := func(seq uint64) []byte {
		d, _ := sender.Seal(nil, datagram(t, 1), Multicast, seq)
		return d
	}
	first := live(1)
	if _, err := r.Open(first, Multicast); err != nil {
		t.Fatal(err)
	}
	for inc := uint64(100); inc < 100+2*maxWindows; inc++ {
		d, _ := sender.Seal(nil, datagram(t, inc), Multicast, 1)
		if _, err := r.Open(d, Multicast); err != nil {
			t.Fatal(err)
		}
		if inc%64 == 0 {
			if _, err := r.Open(live(inc), Multicast); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(r.windows) > maxWindows {
		t.Errorf("%d windows kept, at most %d", len(r.windows), maxWindows)
	}
	if _, err := r.Open(first, Multicast); !errors.Is(err, ErrReplay) {
		t.Errorf("the live sender's window was forgotten: its first datagram replayed: %v", err)
	}
}

// Two different keys with one ID are refused, and a key prints as its ID.
func TestKeyIDCollisionRefusedAndKeysRedacted(t *testing.T) {
	seen := map[uint32]Key{}
	var a, b Key
	for {
		k := mustKey(t)
		if o, ok := seen[k.ID()]; ok {
			a, b = o, k
			break
		}
		seen[k.ID()] = k
	}
	r := ring(t, a)
	if err := r.Install(b); err == nil {
		t.Error("a second key with the ID of one installed was taken")
	}
	if err := r.Install(a); err != nil {
		t.Errorf("installing a key again: %v", err)
	}
	if _, err := NewRing(a, b); err == nil {
		t.Error("NewRing took two keys with one ID")
	}
	if s := fmt.Sprint(a); strings.Contains(s, a.Encode()) || !strings.Contains(s, FormatID(a.ID())) {
		t.Errorf("a key prints as %q", s)
	}
}

func TestReplaceKeyFileAndParseID(t *testing.T) {
	path := t.TempDir() + "/key"
	a, b := mustKey(t), mustKey(t)
	if err := WriteKeyFile(path, a); err != nil {
		t.Fatal(err)
	}
	if err := ReplaceKeyFile(path, b, a); err != nil {
		t.Fatal(err)
	}
	keys, err := LoadKeyFile(path)
	if err != nil || len(keys) != 2 || !Equal(keys[0], b) || !Equal(keys[1], a) {
		t.Fatalf("after ReplaceKeyFile: %d keys, %v", len(keys), err)
	}
	if id, err := ParseID(FormatID(a.ID())); err != nil || id != a.ID() {
		t.Errorf("ParseID(FormatID) = %x, %v", id, err)
	}
	if _, err := ParseID("xyz"); err == nil {
		t.Error("a bad key ID was parsed")
	}
}

// A read-only key in systemd's credentials directory, whose group bits show
// the access list's mask (0440), is taken; the same mode elsewhere, or a
// writable one there, or one others can read, is not.
func TestKeyFileCredential(t *testing.T) {
	creds, other := t.TempDir(), t.TempDir()
	k := mustKey(t)
	for _, d := range []string{creds, other} {
		if err := WriteKeyFile(d+"/key", k); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("CREDENTIALS_DIRECTORY", creds)
	for _, c := range []struct {
		path string
		mode os.FileMode
		ok   bool
	}{
		{creds + "/key", 0o440, true},
		{creds + "/key", 0o400, true},
		{creds + "/key", 0o460, false},
		{creds + "/key", 0o444, false},
		{other + "/key", 0o440, false},
	} {
		if err := os.Chmod(c.path, c.mode); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKeyFile(c.path); (err == nil) != c.ok {
			t.Errorf("%s mode %04o: %v, want ok=%v", c.path, c.mode, err, c.ok)
		}
	}
}

// A node never takes its own datagrams: one sent back to it (captured and
// replayed) is dropped as a replay, though no window has seen it.
func TestSealOwnDatagramIsReplay(t *testing.T) {
	k := mustKey(t)
	self, other := ring(t, k), ring(t, k)
	d, err := self.Seal(nil, datagram(t, 42), Multicast, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := self.Open(append([]byte(nil), d...), Multicast); !errors.Is(err, ErrReplay) {
		t.Fatalf("own datagram opened: %v, want ErrReplay", err)
	}
	if _, err := other.Open(d, Multicast); err != nil {
		t.Fatalf("another node cannot open it: %v", err)
	}
}

// Replacements of one key file at once each write a file of their own:
// none fails, and the file holds one of them whole.
func TestReplaceKeyFileConcurrently(t *testing.T) {
	path := filepath.Join(t.TempDir(), "group.key")
	k := mustKey(t)
	if err := WriteKeyFile(path, k); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ReplaceKeyFile(path, k, mustKey(t)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	keys, err := LoadKeyFile(path)
	if err != nil || len(keys) != 2 {
		t.Fatalf("after the replacements: %v, %v", keys, err)
	}
	if left, _ := filepath.Glob(path + ".*"); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
