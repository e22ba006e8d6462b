package main

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcnode/mcnode/seal"
)

// A key change that would cut a member off is refused, naming the member.
func TestKeysAllowed(t *testing.T) {
	held := memberKeys{Node: 2, Addr: "10.0.0.2:7946", Answered: true, Keys: []string{"aaaaaaaa", "bbbbbbbb"}}
	cases := []struct {
		op, id string
		m      memberKeys
		want   string // "" allowed
	}{
		{"key-use", "bbbbbbbb", held, ""},
		{"key-use", "cccccccc", held, "node 2 (10.0.0.2:7946) lacks key cccccccc"},
		{"key-remove", "bbbbbbbb", held, ""},
		{"key-remove", "aaaaaaaa", held, "still seals with key aaaaaaaa"},
		{"key-use", "bbbbbbbb", memberKeys{Node: 3, Addr: "10.0.0.3:7946"}, "node 3 (10.0.0.3:7946) did not answer"},
		{"key-remove", "bbbbbbbb", memberKeys{Node: 3, Answered: true, Error: "no keys"}, "cannot list its keys"},
		// Node 3 seals with bbbbbbbb and has not aaaaaaaa (a --local split):
		// removing either one cuts someone off.
		{"key-remove", "cccccccc", memberKeys{Node: 3, Addr: "10.0.0.3:7946", Answered: true, Keys: []string{"bbbbbbbb"}}, "node 3 (10.0.0.3:7946) could not open what"},
	}
	for _, c := range cases {
		err := keysAllowed([]string{"aaaaaaaa", "bbbbbbbb"}, []memberKeys{held, c.m}, request{Op: c.op, ID: c.id})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s %s: %v, want allowed", c.op, c.id, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %s with %+v: %v, want %q", c.op, c.id, c.m, err, c.want)
		}
	}
}

// This node's own keys are checked first, and a refusal names this node:
// removing the key it seals with once blamed another member that sealed
// with it too.
func TestThisNodeAllows(t *testing.T) {
	own := []string{"aaaaaaaa", "bbbbbbbb"}
	for _, c := range []struct{ op, id, want string }{
		{"key-use", "bbbbbbbb", ""},
		{"key-use", "cccccccc", "this node lacks key cccccccc"},
		{"key-remove", "bbbbbbbb", ""},
		{"key-remove", "aaaaaaaa", "this node still seals with key aaaaaaaa"},
		{"key-install", "cccccccc", ""},
	} {
		err := thisNodeAllows(own, request{Op: c.op, ID: c.id})
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v, want %q", c.op, c.id, err, c.want)
		}
	}
}

// fakeRing is a keyRing in memory.
type fakeRing struct{ ring *seal.Ring }

func (f *fakeRing) keyIDs() ([]uint32, error) {
	var ids []uint32
	for _, k := range f.ring.Keys() {
		ids = append(ids, k.ID())
	}
	return ids, nil
}
func (f *fakeRing) installKey(k seal.Key) error { return f.ring.Install(k) }
func (f *fakeRing) useKey(id uint32) error      { return f.ring.Use(id) }
func (f *fakeRing) removeKey(id uint32) error   { return f.ring.Remove(id) }

// racingRing is a fakeRing on which another request removes a key just
// before the first removal of it: a member's removal landing between a
// look at the ring and a change to it.
type racingRing struct {
	fakeRing
	raced bool
}

func (r *racingRing) removeKey(id uint32) error {
	if !r.raced {
		r.raced = true
		_ = r.ring.Remove(id)
	}
	return r.fakeRing.removeKey(id)
}

// A removal that a member's removal of the same key overtakes is done, not
// refused with "no key in the ring": here (mcnode keys remove), where it
// goes on to the members, and at a member (its key agent), where the key
// is gone either way.
func TestRemoveOvertakenByAMember(t *testing.T) {
	a, b := mustKey(t), mustKey(t)
	bID := seal.FormatID(b.ID())
	members := func() []memberKeys {
		return []memberKeys{{Node: 2, Answered: true, Keys: []string{seal.FormatID(a.ID()), bID}}}
	}
	ring := func() *racingRing {
		r, err := seal.NewRing(a, b)
		if err != nil {
			t.Fatal(err)
		}
		return &racingRing{fakeRing: fakeRing{r}}
	}
	if ids, _, err := changeHere(ring(), request{Op: "key-remove", ID: bID}, members); err != nil || len(ids) != 1 {
		t.Errorf("mcnode keys remove overtaken: %v, %v; want done", ids, err)
	}
	agent := &keyAgent{ring: ring()}
	if ids, err := agent.apply(keyMessage{Op: "key-remove", ID: bID}); err != nil || len(ids) != 1 {
		t.Errorf("a member's key agent overtaken: %v, %v; want done", ids, err)
	}
}

// A key asked for by another member is read from this host's own key file
// at the path named, and only if it has the ID asked for: a key never
// travels, so a holder of the key in use cannot plant a key of its own.
func TestRemoteInstallReadsTheHostsFile(t *testing.T) {
	old, next, rogue := mustKey(t), mustKey(t), mustKey(t)
	r, err := seal.NewRing(old)
	if err != nil {
		t.Fatal(err)
	}
	a := &keyAgent{ring: &fakeRing{r}}
	dir := t.TempDir()
	path := filepath.Join(dir, "next.key")
	if err := seal.WriteKeyFile(path, next); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		msg  keyMessage
		want string // error; "" to install
	}{
		{"another ID than the file's", keyMessage{Op: "key-install", ID: seal.FormatID(rogue.ID()), Path: path}, "holds no key"},
		{"no file there", keyMessage{Op: "key-install", ID: seal.FormatID(next.ID()), Path: filepath.Join(dir, "none.key")}, "copy the key file"},
		{"a relative path", keyMessage{Op: "key-install", ID: seal.FormatID(next.ID()), Path: "next.key"}, "absolute"},
		{"the file's key", keyMessage{Op: "key-install", ID: seal.FormatID(next.ID()), Path: path}, ""},
	} {
		ids, err := a.apply(c.msg)
		switch {
		case c.want == "" && err != nil:
			t.Fatalf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Fatalf("%s: %v, want %q", c.name, err, c.want)
		case c.want != "" && len(ids) != 1:
			t.Fatalf("%s: the ring changed: %v", c.name, ids)
		}
	}
	if got := r.Keys(); len(got) != 2 || got[1].ID() != next.ID() {
		t.Fatalf("ring %v, want the old key and the file's", got)
	}
}

func mustKey(t *testing.T) seal.Key {
	t.Helper()
	k, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// mcnode keys gives up on a daemon that does not answer (stopped, or hung),
// saying so, as status and lock do; it waited for ever.
func TestKeysGivesUpOnADaemonThatDoesNotAnswer(t *testing.T) {
	defer func(d time.Duration) { keysAnswerTimeout = d }(keysAnswerTimeout)
	keysAnswerTimeout = 200 * time.Millisecond
	path := filepath.Join(t.TempDir(), "mcnode.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			go io.Copy(io.Discard, c) // reads the request, never answers
		}
	}()
	done := make(chan error, 1)
	go func() { done <- newApp().Run([]string{"mcnode", "keys", "list", "--socket", path}) }()
	select {
	case err := <-done:
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), "did not answer within 200ms") {
			t.Fatalf("mcnode keys list against a silent daemon: %v, want exit 1 saying it did not answer", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mcnode keys list still waits for a daemon that never answers")
	}
}

// A removal run again (the first timed out, or some members missed it) is
// done here already and must still go on to the members that have the key:
// it stopped at this node with "no key in the ring", and the members that
// missed it kept the key. A key nobody has (a typo) is refused, and so is a
// malformed ID.
func TestRemoveRunAgainGoesOn(t *testing.T) {
	a, b := mustKey(t), mustKey(t)
	r, err := seal.NewRing(a, b)
	if err != nil {
		t.Fatal(err)
	}
	kr := &fakeRing{r}
	bID := seal.FormatID(b.ID())
	missed := []memberKeys{{Node: 2, Answered: true, Keys: []string{seal.FormatID(a.ID()), bID}}}
	members := func() []memberKeys { return missed }
	req := request{Op: "key-remove", ID: bID}
	ids, warning, err := changeHere(kr, req, members)
	if err != nil || warning != "" || len(ids) != 1 {
		t.Fatalf("first removal: %v, %q, %v", ids, warning, err)
	}
	ids, warning, err = changeHere(kr, req, members)
	if err != nil || len(ids) != 1 || !strings.Contains(warning, "removed from the other members only") {
		t.Fatalf("the removal run again: %v, %q, %v; want done here, a warning, and on to the members", ids, warning, err)
	}
	none := func() []memberKeys {
		return []memberKeys{{Node: 2, Answered: true, Keys: []string{seal.FormatID(a.ID())}}}
	}
	if _, _, err := changeHere(kr, req, none); err == nil || !strings.Contains(err.Error(), "no member has key") {
		t.Errorf("a removal of a key no member has: %v, want refused", err)
	}
	silent := func() []memberKeys { return []memberKeys{{Node: 2}} }
	if _, _, err := changeHere(kr, req, silent); err == nil {
		t.Error("a removal of a key no member said it has was taken without --force")
	}
	forced := req
	forced.Force = true
	if _, _, err := changeHere(kr, forced, silent); err != nil {
		t.Errorf("with --force, a member that did not answer may have the key: %v", err)
	}
	if _, _, err := changeHere(kr, request{Op: "key-remove", ID: "not-an-id"}, members); err == nil {
		t.Error("a removal of a malformed key ID was taken")
	}
}

// The README gives the time mcnode keys waits for its daemon, and the 3 s a
// change waits for the members, as the code has them: it states them by
// hand, where the help text takes them from the variables.
func TestREADMEGivesTheKeysTimeouts(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(b)), " ")
	for _, c := range []struct {
		re   string
		want time.Duration
	}{
		{`its own daemon if that does not answer within (\d+) s`, keysAnswerTimeout},
		{`A member that did not answer within (\d+) s is named`, keySpreadTimeout},
	} {
		m := regexp.MustCompile(c.re).FindStringSubmatch(text)
		if m == nil {
			t.Errorf("the README no longer says %q", c.re)
			continue
		}
		if m[1]+"s" != c.want.String() {
			t.Errorf("the README says %s s (%q); the code waits %v", m[1], c.re, c.want)
		}
	}
}

// ringNode is a keyedNode over a ring in memory.
type ringNode struct{ ring *seal.Ring }

func (r ringNode) InstallKey(k seal.Key) error  { return r.ring.Install(k) }
func (r ringNode) UseKey(id uint32) error       { return r.ring.Use(id) }
func (r ringNode) RemoveKey(id uint32) error    { return r.ring.Remove(id) }
func (r ringNode) KeyRing() ([]seal.Key, error) { return r.ring.Keys(), nil }

// A removal that reached the quorum links and failed before the multicast
// group the peers came from and the key file (or a run cut short between
// them) is repaired by running it again, as mcnode keys says to: the node
// that lacks the key already still removes it from the group and rewrites
// the file, and reports the key gone here (seal.ErrNoSuchKey). Before, the
// second run stopped at the node, and a restart brought the key back.
func TestRemovalRunAgainRepairsGroupAndFile(t *testing.T) {
	a, b := mustKey(t), mustKey(t)
	links, err := seal.NewRing(a) // b removed here by the first run
	if err != nil {
		t.Fatal(err)
	}
	group, err := seal.NewRing(a, b) // ... and not from the group
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "group.key")
	if err := seal.WriteKeyFile(path, a, b); err != nil { // nor from the file
		t.Fatal(err)
	}
	remove := func(n keyedNode) error { return n.RemoveKey(b.ID()) }
	err = changeNodeKeys(ringNode{links}, ringNode{group}, path, remove, true)
	if !errors.Is(err, seal.ErrNoSuchKey) {
		t.Errorf("run again: %v, want seal.ErrNoSuchKey (gone here already)", err)
	}
	if ids, _ := (&fakeRing{group}).keyIDs(); len(ids) != 1 {
		t.Errorf("the multicast group still has %d keys, want 1", len(ids))
	}
	keys, err := seal.LoadKeyFile(path)
	if err != nil || len(keys) != 1 || keys[0].ID() != a.ID() {
		t.Errorf("the key file holds %d keys (%v), want only the one kept", len(keys), err)
	}
	// Anything but a removal of a key the node lacks still stops there.
	use := func(n keyedNode) error { return n.UseKey(b.ID()) }
	if err := changeNodeKeys(ringNode{links}, ringNode{group}, path, use, false); !errors.Is(err, seal.ErrNoSuchKey) {
		t.Errorf("key-use of a key the node lacks: %v", err)
	}
}
