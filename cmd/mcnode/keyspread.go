package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/seal"
)

// A key change made with `mcnode keys` reaches every member, as `serf keys`
// does: the daemon makes it, then publishes it as an application update on
// keysTopic, and every member's daemon makes it too and answers with its
// key IDs. Updates travel sealed with the group key, so only a key holder
// can ask for a change. Updates are best effort: the request is sent again
// to the members that have not answered, and a member answers a request it
// has already carried out from its record, without doing it twice.
//
// A new key itself never travels: a key is rotated because the one in use
// may have leaked, and whoever holds it would read the new one in the
// update that carried it, or plant a key of its own on every member. An
// install names the key's ID and the path of its key file, which the
// operator copies to every host (as the first key file); each member reads
// the key from its own file system, and takes it only if its ID is the one
// asked for. A key holder can still ask members to seal with a key they
// hold, or to drop one: that can disturb a rotation, not defeat it.
const keysTopic = "mcnode.keys"

const (
	// keySpreadTimeout is how long a change waits for the members' answers.
	keySpreadTimeout = 3 * time.Second
	// keySpreadRetry is how often the request is sent again meanwhile.
	keySpreadRetry = 250 * time.Millisecond
	// keysRemembered is how many requests a daemon remembers its answer to.
	keysRemembered = 64
)

// keyMessage is a key request or a member's answer to one, on keysTopic.
type keyMessage struct {
	Req   uint64   `json:"req"`
	Op    string   `json:"op,omitempty"`   // a request: keys, key-install, key-use, key-remove
	ID    string   `json:"id,omitempty"`   // the key's ID
	Path  string   `json:"path,omitempty"` // key-install: where every host keeps its key file
	Reply bool     `json:"reply,omitempty"`
	Keys  []string `json:"keys,omitempty"`  // an answer: the member's key IDs, the sealing one first
	Error string   `json:"error,omitempty"` // an answer: why the member could not
	// Warning: an answer: the change was made, but not all of it (the key
	// file not rewritten).
	Warning string `json:"warning,omitempty"`
}

// memberKeys is one member's answer, as the control protocol reports it.
type memberKeys struct {
	Node     uint64   `json:"node"`
	Addr     string   `json:"addr"`
	Answered bool     `json:"answered"`
	Keys     []string `json:"keys,omitempty"`
	Error    string   `json:"error,omitempty"`
	Warning  string   `json:"warning,omitempty"`
}

// keyAgent carries out the key requests other members publish, and
// collects the answers to this daemon's own.
type keyAgent struct {
	l    mcnode.Locker
	ring keyRing
	log  zerolog.Logger

	mu      sync.Mutex
	done    map[uint64]keyMessage // answers given, by request
	order   []uint64              // their order, to forget the oldest
	waiting map[uint64]chan<- answer
}

type answer struct {
	from uint64
	msg  keyMessage
}

// startKeyAgent starts l's agent; it ends with l.
func startKeyAgent(l mcnode.Locker, ring keyRing, log zerolog.Logger) *keyAgent {
	a := &keyAgent{l: l, ring: ring, log: log, done: map[uint64]keyMessage{}, waiting: map[uint64]chan<- answer{}}
	updates, _ := l.Subscribe(keysTopic)
	go a.serve(updates)
	return a
}

func (a *keyAgent) serve(updates <-chan mcnode.Update) {
	for u := range updates {
		var m keyMessage
		if err := json.Unmarshal(u.Data, &m); err != nil || m.Req == 0 {
			a.log.Warn().Uint64("from", u.From).Msg("a key request that does not parse: ignored")
			continue
		}
		if m.Reply {
			a.mu.Lock()
			if ch, ok := a.waiting[m.Req]; ok {
				select {
				case ch <- answer{u.From, m}:
				default: // the collector has enough queued; the member answers again
				}
			}
			a.mu.Unlock()
			continue
		}
		a.answer(u.From, m)
	}
}

// answer carries out a request once, and answers it every time it comes.
func (a *keyAgent) answer(from uint64, m keyMessage) {
	a.mu.Lock()
	reply, seen := a.done[m.Req]
	a.mu.Unlock()
	if !seen {
		reply = keyMessage{Req: m.Req, Reply: true}
		ids, err := a.apply(m)
		warning, err := warningOf(err)
		if err != nil {
			reply.Error = err.Error()
		}
		reply.Warning = warning
		reply.Keys = ids
		if m.Op != "keys" {
			ev := a.log.Info()
			if err != nil {
				ev = a.log.Warn().Err(err)
			} else if warning != "" {
				ev = a.log.Warn().Str("warning", warning)
			}
			ev.Uint64("from", from).Str("op", m.Op).Strs("keys", ids).Msg("group key change asked by a member")
		}
		a.mu.Lock()
		a.done[m.Req] = reply
		a.order = append(a.order, m.Req)
		if len(a.order) > keysRemembered {
			delete(a.done, a.order[0])
			a.order = a.order[1:]
		}
		a.mu.Unlock()
	}
	a.publish(reply)
}

// apply makes the change here and returns the key IDs after it. Removing a
// key this member does not have is no error: it is gone either way.
func (a *keyAgent) apply(m keyMessage) ([]string, error) {
	switch m.Op {
	case "key-install":
		k, err := keyFromFile(m.Path, m.ID)
		if err != nil {
			ids, _ := keyIDsOf(a.ring)
			return ids, err
		}
		return changeKeyRing(a.ring, request{Op: m.Op, Key: k.Encode()})
	case "key-remove":
		ids, err := changeKeyRing(a.ring, request{Op: m.Op, ID: m.ID})
		if errors.Is(err, seal.ErrNoSuchKey) {
			return keyIDsOf(a.ring)
		}
		return ids, err
	case "keys", "key-use":
		return changeKeyRing(a.ring, request{Op: m.Op, ID: m.ID})
	}
	ids, _ := keyIDsOf(a.ring)
	return ids, fmt.Errorf("unknown key operation %q", m.Op)
}

func (a *keyAgent) publish(m keyMessage) {
	b, _ := json.Marshal(m)
	if err := a.l.Publish(keysTopic, b); err != nil {
		a.log.Warn().Err(err).Msg("cannot publish a key message")
	}
}

// ask publishes op to every other member and collects their answers, until
// all have answered or keySpreadTimeout. Members that never answer are
// listed as such.
func (a *keyAgent) ask(ctx context.Context, op, id, path string) []memberKeys {
	var b [8]byte
	_, _ = rand.Read(b[:])
	req := keyMessage{Req: binary.LittleEndian.Uint64(b[:]) | 1, Op: op, ID: id, Path: path}
	answers := make(chan answer, 256)
	a.mu.Lock()
	a.waiting[req.Req] = answers
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.waiting, req.Req)
		a.mu.Unlock()
	}()
	got := map[uint64]*memberKeys{}
	var order []uint64
	if st, err := a.l.Status(); err == nil {
		for _, m := range st.Members {
			if m.ID != st.Self {
				got[m.ID] = &memberKeys{Node: m.ID, Addr: m.Addr}
				order = append(order, m.ID)
			}
		}
	}
	missing := len(got)
	deadline := time.NewTimer(keySpreadTimeout)
	defer deadline.Stop()
	retry := time.NewTicker(keySpreadRetry)
	defer retry.Stop()
	if missing > 0 {
		a.publish(req)
	}
	for missing > 0 {
		select {
		case <-ctx.Done():
			missing = 0
		case <-deadline.C:
			missing = 0
		case <-retry.C:
			a.publish(req)
		case an := <-answers:
			if m, ok := got[an.from]; ok && !m.Answered {
				m.Answered, m.Keys, m.Error, m.Warning = true, an.msg.Keys, an.msg.Error, an.msg.Warning
				missing--
			}
		}
	}
	out := make([]memberKeys, 0, len(order))
	for _, id := range order {
		out = append(out, *got[id])
	}
	return out
}

func keyIDsOf(r keyRing) ([]string, error) {
	ids, err := r.keyIDs()
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = seal.FormatID(id)
	}
	return out, err
}

// keyFromFile reads the key with this ID from a key file on this host,
// checked as --keyfile is (mode 0600, owned by this user or root).
func keyFromFile(path, id string) (seal.Key, error) {
	want, err := seal.ParseID(id)
	if err != nil {
		return seal.Key{}, err
	}
	if !filepath.IsAbs(path) {
		return seal.Key{}, fmt.Errorf("key file %q: not an absolute path", path)
	}
	// Another member named the path: a FIFO there must not hang this
	// member's key agent.
	keys, err := seal.LoadRegularKeyFile(path)
	if err != nil {
		return seal.Key{}, fmt.Errorf("%w: copy the key file to this host at the same path, then ask again", err)
	}
	for _, k := range keys {
		if k.ID() == want {
			return k, nil
		}
	}
	return seal.Key{}, fmt.Errorf("key file %s on this host holds no key %s", path, id)
}
