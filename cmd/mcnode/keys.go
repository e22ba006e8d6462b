package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/quorumfallback/node"
	"github.com/mcnode/mcnode/seal"
)

// keyRing is a daemon's node whose group keys can be changed while it runs.
type keyRing interface {
	keyIDs() ([]uint32, error)
	installKey(seal.Key) error
	useKey(id uint32) error
	removeKey(id uint32) error
}

var errNoKeys = errors.New("this daemon has no group key: start it with --keyfile")

// keyRingOf returns the key ring of the daemon's node, once it has one.
func keyRingOf(g locker) (keyRing, error) {
	if j, ok := g.(*joining); ok {
		node, err := j.get()
		if err != nil {
			return nil, err
		}
		g = node
	}
	if kr, ok := g.(keyRing); ok {
		return kr, nil
	}
	return nil, errNoKeys
}

// changeKeyRing carries out a key operation of the control protocol on
// this daemon's ring alone and returns the key IDs afterwards, the one
// sealing first; with a *keyFileNotRewritten if the change was made but
// not written to the key file.
func changeKeyRing(kr keyRing, req request) ([]string, error) {
	var err error
	switch req.Op {
	case "key-install":
		k, perr := seal.ParseKey(req.Key)
		if perr != nil {
			return nil, perr
		}
		err = kr.installKey(k)
	case "key-use", "key-remove":
		id, perr := seal.ParseID(req.ID)
		if perr != nil {
			return nil, perr
		}
		if req.Op == "key-use" {
			err = kr.useKey(id)
		} else {
			err = kr.removeKey(id)
		}
	}
	if _, failed := warningOf(err); failed != nil {
		return nil, failed
	}
	// Made, though perhaps not in the key file: then err says so, and the
	// caller warns (warningOf) and goes on.
	ids, lerr := keyIDsOf(kr)
	if lerr != nil {
		return nil, lerr
	}
	return ids, err
}

// keyFileNotRewritten: a key change was made to the running node, but its
// key file could not be rewritten, so a restart undoes the change. That is
// the case by design under docs/mcnode.service, whose key file systemd
// hands over read-only; the change is then to be made in the file the
// service loads it from as well.
type keyFileNotRewritten struct {
	path string
	err  error
}

func (e *keyFileNotRewritten) Error() string {
	return fmt.Sprintf("the running node has the change, but its key file %s was not rewritten, so a restart undoes it (update the file it is loaded from too): %v", e.path, e.err)
}

func (e *keyFileNotRewritten) Unwrap() error { return e.err }

// warningOf splits off from err the part that is only a warning (the key
// file not rewritten): what to tell the user, and the error left.
func warningOf(err error) (warning string, rest error) {
	var unsaved *keyFileNotRewritten
	if errors.As(err, &unsaved) {
		return unsaved.Error(), nil
	}
	return "", err
}

// manageKeys carries out a key operation of the control protocol: on this
// daemon, then on every other member (see keysTopic), unless req.Local.
// Before a member is asked to seal with a key, or to drop one, every
// member must hold that key, or no longer seal with it (unless req.Force):
// out of order, members would be cut off from each other.
func manageKeys(g locker, req request) (response, error) {
	kr, err := keyRingOf(g)
	if err != nil {
		return response{}, err
	}
	if req.Op == "key-use" || req.Op == "key-remove" {
		// One spelling of each ID: the checks below compare them as text.
		id, err := seal.ParseID(req.ID)
		if err != nil {
			return response{}, err
		}
		req.ID = seal.FormatID(id)
	}
	agent := keyAgentOf(g)
	if req.Local || agent == nil {
		ids, err := changeKeyRing(kr, req)
		warning, err := warningOf(err)
		return response{OK: true, Keys: ids, Warning: warning}, err
	}
	ctx := context.Background()
	if st, err := agent.l.Status(); err != nil {
		return response{}, err
	} else if st.Mode == mcnode.Multicast && !st.Joined {
		// Its view of the members is gone while it rejoins: it would ask
		// nobody, and say it was done.
		return response{}, errors.New("this daemon is not a member of the group now (it is rejoining): nothing changed; try again, or change this daemon alone with --local")
	}
	var members []memberKeys
	askKeys := func() []memberKeys {
		if members == nil {
			members = agent.ask(ctx, "keys", "", "")
		}
		return members
	}
	if (req.Op == "key-use" || req.Op == "key-remove") && !req.Force {
		own, err := keyIDsOf(kr)
		if err != nil {
			return response{}, err
		}
		if err := thisNodeAllows(own, req); err != nil {
			return response{}, err
		}
		if err := keysAllowed(own, askKeys(), req); err != nil {
			return response{}, err
		}
	}
	ids, warning, err := changeHere(kr, req, askKeys)
	if err != nil {
		return response{}, err
	}
	id := req.ID
	if req.Op == "key-install" {
		k, _ := seal.ParseKey(req.Key) // parsed by changeKeyRing
		id = seal.FormatID(k.ID())
	}
	return response{OK: true, Keys: ids, Warning: warning, Members: agent.ask(ctx, req.Op, id, req.Path)}, nil
}

// changeHere makes req's change on this node's ring, before it goes to the
// members, and returns the key IDs after it and a warning. A removal of a
// key this node no longer has is done here already: a run that timed out,
// or that some members missed, is run again for them (mcnode keys says to),
// and must not stop at this node.
func changeHere(kr keyRing, req request, members func() []memberKeys) (ids []string, warning string, err error) {
	ids, err = changeKeyRing(kr, req)
	if req.Op == "key-remove" && errors.Is(err, seal.ErrNoSuchKey) {
		// Tried rather than looked up first: a member's request may remove
		// the key between a look and the removal.
		if ids, err = keyIDsOf(kr); err != nil {
			return nil, "", err
		}
		if err := someoneHas(members(), req); err != nil {
			return nil, "", err
		}
		return ids, fmt.Sprintf("no key %s here any more (an earlier run removed it?): removed from the other members only", req.ID), nil
	}
	warning, err = warningOf(err)
	return ids, warning, err
}

// someoneHas refuses the removal of a key this node does not have unless a
// member lists it, or with --force a member did not say: a key nobody has
// is a typo (and a script that retires a leaked key must not be told it
// did), or gone everywhere already.
func someoneHas(members []memberKeys, req request) error {
	unsure := false
	for _, m := range members {
		switch {
		case !m.Answered || m.Error != "":
			unsure = true
		case slices.Contains(m.Keys, req.ID):
			return nil
		}
	}
	if unsure && req.Force {
		return nil
	}
	return fmt.Errorf("no member has key %s (a typo? see mcnode keys list; or it is gone everywhere already): nothing changed", req.ID)
}

// thisNodeAllows checks req against this node's own key IDs, before the
// members are asked: a key it lacks cannot seal, and the key it seals with
// cannot go.
func thisNodeAllows(own []string, req request) error {
	switch {
	case req.Op == "key-use" && !slices.Contains(own, req.ID):
		return fmt.Errorf("this node lacks key %s: nothing changed (mcnode keys install it first)", req.ID)
	case req.Op == "key-remove" && len(own) > 0 && own[0] == req.ID:
		return fmt.Errorf("this node still seals with key %s: nothing changed (mcnode keys use the new key first)", req.ID)
	}
	return nil
}

// keysAllowed checks, from every member's key IDs, that req cuts nobody off.
func keysAllowed(own []string, members []memberKeys, req request) error {
	for _, m := range members {
		who := fmt.Sprintf("node %d (%s)", m.Node, m.Addr)
		switch {
		case !m.Answered:
			return fmt.Errorf("%s did not answer, so it may lack key %s: nothing changed (make sure, then --force)", who, req.ID)
		case m.Error != "":
			return fmt.Errorf("%s cannot list its keys: %s: nothing changed", who, m.Error)
		case req.Op == "key-use" && !slices.Contains(m.Keys, req.ID):
			return fmt.Errorf("%s lacks key %s: nothing changed (mcnode keys install it first)", who, req.ID)
		case req.Op == "key-remove" && len(m.Keys) > 0 && m.Keys[0] == req.ID:
			return fmt.Errorf("%s still seals with key %s: nothing changed (mcnode keys use the new key first)", who, req.ID)
		}
	}
	if req.Op != "key-remove" {
		return nil
	}
	// Once the key is gone, every member must still open what every other
	// member seals (a key changed on one daemon with --local or --force
	// could have split them).
	all := append([]memberKeys{{Node: ^uint64(0), Addr: "this node", Answered: true, Keys: own}}, members...)
	for _, sealer := range all {
		if len(sealer.Keys) == 0 {
			continue
		}
		for _, m := range all {
			if sealed := sealer.Keys[0]; !slices.Contains(m.Keys, sealed) || sealed == req.ID {
				return fmt.Errorf("without key %s, %s could not open what %s seals with key %s: nothing changed", req.ID, describe(m), describe(sealer), sealed)
			}
		}
	}
	return nil
}

func describe(m memberKeys) string {
	if m.Node == ^uint64(0) {
		return m.Addr
	}
	return fmt.Sprintf("node %d (%s)", m.Node, m.Addr)
}

// keyAgentOf returns the daemon's key agent, if its group has keys.
func keyAgentOf(g locker) *keyAgent {
	if j, ok := g.(*joining); ok {
		node, err := j.get()
		if err != nil {
			return nil
		}
		g = node
	}
	if d, ok := g.(daemonNode); ok {
		return d.keys
	}
	return nil
}

// keyedNode is a runtime whose group keys change while it runs: a
// multicast group or a quorum-mode node.
type keyedNode interface {
	InstallKey(seal.Key) error
	UseKey(id uint32) error
	RemoveKey(id uint32) error
	KeyRing() ([]seal.Key, error)
}

// The daemon's key ring: each change is made to the running node, then
// written to the key file, so that a restart keeps it.
func (d daemonNode) keyed() (keyedNode, error) {
	if k, ok := mcnode.Unwrap(d.Locker).(keyedNode); ok {
		return k, nil
	}
	return nil, errNoKeys
}

func (d daemonNode) keyIDs() ([]uint32, error) {
	k, err := d.keyed()
	if err != nil {
		return nil, err
	}
	keys, err := k.KeyRing()
	if err == nil && len(keys) == 0 {
		err = errNoKeys
	}
	ids := make([]uint32, len(keys))
	for i, key := range keys {
		ids[i] = key.ID()
	}
	return ids, err
}

func (d daemonNode) installKey(k seal.Key) error {
	return d.changeKeys(func(n keyedNode) error { return n.InstallKey(k) }, false)
}
func (d daemonNode) useKey(id uint32) error {
	return d.changeKeys(func(n keyedNode) error { return n.UseKey(id) }, false)
}
func (d daemonNode) removeKey(id uint32) error {
	return d.changeKeys(func(n keyedNode) error { return n.RemoveKey(id) }, true)
}

// keyChanges makes one key change at a time in this process: a change
// from the control socket and one from another member must not interleave
// between the ring and the key file.
var keyChanges sync.Mutex

func (d daemonNode) changeKeys(change func(keyedNode) error, removal bool) error {
	keyChanges.Lock()
	defer keyChanges.Unlock()
	k, err := d.keyed()
	if err != nil {
		return err
	}
	var via keyedNode
	if d.via != nil {
		via = d.via
	}
	return changeNodeKeys(k, via, d.keyfile, change, removal)
}

// changeNodeKeys makes a key change on node k, then on via (quorum mode's
// multicast group, if the peers came from one; nil if not), then writes
// k's keys to keyfile ("" for none). A removal (removal true) of a key k
// lacks is still made on via and in the key file, which a run that failed
// between them left behind, before its seal.ErrNoSuchKey is returned: run
// again, as mcnode keys says to, it repairs them.
func changeNodeKeys(k, via keyedNode, keyfile string, change func(keyedNode) error, removal bool) error {
	gone := func(err error) bool { return removal && errors.Is(err, seal.ErrNoSuchKey) }
	missing := change(k)
	if missing != nil && !gone(missing) {
		if errors.Is(missing, group.ErrNoKey) || errors.Is(missing, node.ErrNoKey) {
			return errNoKeys
		}
		return missing
	}
	if via != nil {
		// Quorum mode found its peers through a multicast group: that
		// group's sealing follows, or a restarted daemon, with the new key
		// file, would not find them.
		if err := change(via); err != nil && !errors.Is(err, group.ErrNoKey) && !gone(err) {
			// %v: its sentinels are not this change's (a key the group lacks is
			// no key missing here).
			return fmt.Errorf("the quorum links have the change, but the multicast group the peers came from does not: %v", err)
		}
	}
	if keyfile != "" {
		keys, err := k.KeyRing()
		if err == nil {
			err = seal.ReplaceKeyFile(keyfile, keys...)
		}
		if err != nil && missing == nil {
			return &keyFileNotRewritten{path: keyfile, err: err}
		}
	}
	return missing
}

// printKeyIDs prints key IDs, one a line, marking the one sealing.
func printKeyIDs(indent string, ids []string) {
	for i, id := range ids {
		note := ""
		if i == 0 {
			note = "  (seals)"
		}
		fmt.Printf("%s%s%s\n", indent, id, note)
	}
}

// keysAnswerTimeout is how long mcnode keys waits for its daemon's answer:
// only so that a stopped or hung daemon does not hang it for ever. The
// daemon asks the members twice (whether the change cuts anyone off, then
// to make it), each for up to keySpreadTimeout, and rewrites its key file
// (fsync) in between: the rest is room for a slow disk or a busy host. A
// variable for tests.
var keysAnswerTimeout = 2*keySpreadTimeout + 30*time.Second

func keysCommand() *cli.Command {
	do := func(c *cli.Context, req request) error {
		path, err := socketPath(c)
		if err != nil {
			return err
		}
		d, err := dialDaemon(path)
		if err != nil {
			if c.String("socket") != "" {
				return &exitError{code: 1, err: fmt.Errorf("no mcnode run daemon at %s: %w", path, err)}
			}
			return &exitError{code: 1, err: fmt.Errorf("no mcnode run daemon for group %q: %w", c.String("group"), err)}
		}
		defer d.Close()
		d.group = askedGroup(c)
		// A stopped or hung daemon must not hang a script that rotates
		// keys: status and lock give up on one too.
		_ = d.conn.SetDeadline(time.Now().Add(keysAnswerTimeout))
		if err := d.send(req); err != nil {
			return &exitError{code: 1, err: err}
		}
		r, err := d.receive()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("the daemon at %s did not answer within %v: is it stopped (SIGSTOP, Ctrl-Z) or hung?", path, keysAnswerTimeout)
			if req.Op != "keys" {
				err = fmt.Errorf("%w; the change may have been made here and on some members, or may yet be: mcnode keys list shows, and running the same command again is safe", err)
			}
		}
		if err != nil {
			return &exitError{code: 1, err: err}
		}
		if !r.OK {
			return &exitError{code: 1, err: fmt.Errorf("daemon: %s", r.Error)}
		}
		if len(r.Members) > 0 {
			fmt.Println("this node:")
		}
		// A warning goes to stderr, where a script's captured output does
		// not hide it, and named there after the listing.
		var warnings []string
		if r.Warning != "" {
			warnings = append(warnings, "this node: "+r.Warning)
		}
		printKeyIDs("  ", r.Keys)
		var failed []string
		for _, m := range r.Members {
			fmt.Printf("node %d (%s):\n", m.Node, m.Addr)
			switch {
			case !m.Answered:
				fmt.Printf("  did not answer within %v\n", keySpreadTimeout)
				failed = append(failed, fmt.Sprint(m.Node))
			case m.Error != "":
				fmt.Printf("  failed: %s\n", m.Error)
				failed = append(failed, fmt.Sprint(m.Node))
			case m.Warning != "":
				warnings = append(warnings, fmt.Sprintf("node %d (%s): %s", m.Node, m.Addr, m.Warning))
			}
			printKeyIDs("  ", m.Keys)
		}
		for _, w := range warnings {
			fmt.Fprintf(os.Stderr, "mcnode: warning: %s\n", w)
		}
		if len(failed) > 0 {
			nodes := "node"
			if len(failed) > 1 {
				nodes = "nodes"
			}
			if req.Op == "keys" {
				// A listing changes nothing: running it again helps only
				// if those members were busy, not if they hold other keys.
				return &exitError{code: 1, err: fmt.Errorf("listed here and on %d of %s; not on %s %s: is its daemon running, and does it hold a key of this node's (a different --keyfile)?", len(r.Members)-len(failed), plural(len(r.Members), "other member"), nodes, strings.Join(failed, ", "))}
			}
			return &exitError{code: 1, err: fmt.Errorf("done here and on %d of %s; not on %s %s: run the same command again (members do a change once), or on those hosts with --local", len(r.Members)-len(failed), plural(len(r.Members), "other member"), nodes, strings.Join(failed, ", "))}
		}
		return nil
	}
	scope := func(c *cli.Context, req request) request {
		req.Local, req.Force = c.Bool("local"), c.Bool("force")
		return req
	}
	local := &cli.BoolFlag{Name: "local", Usage: "change this daemon's keys only, not every member's"}
	force := &cli.BoolFlag{Name: "force", Usage: "change the keys even if a member did not answer, lacks the key or still seals with it (it is cut off)"}
	oneArg := func(c *cli.Context, what string) (string, error) {
		if c.NArg() != 1 {
			return "", usage("want one argument: %s", what)
		}
		return c.Args().First(), nil
	}
	oneID := func(c *cli.Context, what string) (string, error) {
		id, err := oneArg(c, what)
		if err != nil {
			return "", err
		}
		parsed, err := seal.ParseID(id)
		if err != nil {
			return "", usage("%v", err)
		}
		// As listings show it: the members' lists are compared with it.
		return seal.FormatID(parsed), nil
	}
	return &cli.Command{
		Name:  "keys",
		Usage: "list and rotate the group's keys",
		Description: "Changes the keys of the running `mcnode run` daemon, then of every other member\n" +
			"(through their daemons; each rewrites its --keyfile, so that a restart keeps the\n" +
			"change), and lists each member's keys, the one sealing first. Rotate a group's key\n" +
			"in three steps, and no datagram is lost:\n" +
			"  mcnode keygen /etc/mcnode/new.key      (then copy it to every host, same path)\n" +
			"  mcnode keys install /etc/mcnode/new.key (every member reads it, accepts it)\n" +
			"  mcnode keys use NEWID                  (every member seals with it)\n" +
			"  mcnode keys remove OLDID               (every member refuses the old one)\n" +
			"The new key never travels over the network: whoever holds the key being\n" +
			"replaced would read it. Each member reads it from the same path on its host.\n" +
			"`use` changes nothing unless every member holds the key, and `remove` nothing\n" +
			"while a member still seals with it: a member that seals with a key the others\n" +
			"lack is cut off from them. A member that did not answer is named, and the\n" +
			"status is 1: run the command again, or on that host with --local (this daemon\n" +
			"only). A daemon that does not answer within " + keysAnswerTimeout.String() + " (stopped, or hung) is given up\n" +
			"on, status 1; keys list then shows what was changed. Spreading needs the daemons\n" +
			"to run; a stopped member's key file must be\n" +
			"changed by hand. A member whose key file cannot be rewritten (read-only, as\n" +
			"under docs/mcnode.service) makes the change all the same, and is named with a\n" +
			"warning: a restart would undo it there, so change that file by hand too.",
		OnUsageError: onUsageError,
		Action:       unknownCommand("mcnode keys"),
		Subcommands: []*cli.Command{
			withCommon(&cli.Command{Name: "list", Usage: "list the key IDs, the one sealing first",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "local", Usage: "this daemon's keys only, without asking the other members for theirs"}},
				Action: func(c *cli.Context) error {
					if err := noArguments(c); err != nil {
						return err
					}
					return do(c, scope(c, request{Op: "keys"}))
				}}),
			withCommon(&cli.Command{Name: "install", Usage: "accept a new key from a key file made by mcnode keygen; the other members read it at the same path on their hosts", ArgsUsage: "KEYFILE",
				Flags: []cli.Flag{local},
				Action: func(c *cli.Context) error {
					path, err := oneArg(c, "the key file to install the key of")
					if err != nil {
						return err
					}
					keys, err := seal.LoadKeyFile(path)
					if err != nil {
						return usage("%v", err)
					}
					if len(keys) != 1 {
						return usage("%s holds %d keys; install one key at a time", path, len(keys))
					}
					abs, err := filepath.Abs(path)
					if err != nil {
						return usage("%v", err)
					}
					// The other members read the key from this path on their
					// own hosts: the key never travels (see keysTopic).
					return do(c, scope(c, request{Op: "key-install", Key: keys[0].Encode(), Path: abs}))
				}}),
			withCommon(&cli.Command{Name: "use", Usage: "seal with an installed key", ArgsUsage: "ID",
				Flags: []cli.Flag{local, force},
				Action: func(c *cli.Context) error {
					id, err := oneID(c, "the ID of the key to seal with")
					if err != nil {
						return err
					}
					return do(c, scope(c, request{Op: "key-use", ID: id}))
				}}),
			withCommon(&cli.Command{Name: "remove", Usage: "stop accepting a key (not the one sealing)", ArgsUsage: "ID",
				Flags: []cli.Flag{local, force},
				Action: func(c *cli.Context) error {
					id, err := oneID(c, "the ID of the key to remove")
					if err != nil {
						return err
					}
					return do(c, scope(c, request{Op: "key-remove", ID: id}))
				}}),
		},
	}
}
