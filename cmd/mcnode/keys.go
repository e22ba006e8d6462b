package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode"
	"github.com/mcnode/mcnode/group"
	"github.com/mcnode/mcnode/seal"
)

// keyRing is a daemon's node whose group keys can be changed while it runs.
type keyRing interface {
	keyIDs() ([]uint32, error)
	installKey(seal.Key) error
	useKey(id uint32) error
	removeKey(id uint32) error
}

var (
	errNoKeys = errors.New("this daemon has no group key: start it with --keyfile")
	// errQuorumKeys: quorum mode's TLS links take their keys at start.
	errQuorumKeys = errors.New("a quorum-mode daemon takes its keys when it starts: change the key file on every node and restart the whole group (quorum mode takes back no restarted node)")
)

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

// manageKeys carries out a key operation of the control protocol and
// returns the key IDs afterwards, the one sealing first.
func manageKeys(g locker, req request) ([]string, error) {
	kr, err := keyRingOf(g)
	if err != nil {
		return nil, err
	}
	switch req.Op {
	case "key-install":
		k, err := seal.ParseKey(req.Key)
		if err != nil {
			return nil, err
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
	if err != nil {
		return nil, err
	}
	ids, err := kr.keyIDs()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = seal.FormatID(id)
	}
	return out, nil
}

// The daemon's key ring: each change is made to the running node, then
// written to the key file, so that a restart keeps it.
func (d daemonNode) keyIDs() ([]uint32, error) {
	g, ok := mcnode.Unwrap(d.Locker).(*group.Group)
	if !ok {
		return nil, errQuorumKeys
	}
	ids, err := g.Keys()
	if err == nil && len(ids) == 0 {
		err = errNoKeys
	}
	return ids, err
}

func (d daemonNode) installKey(k seal.Key) error {
	return d.changeKeys(func(g *group.Group) error { return g.InstallKey(k) })
}
func (d daemonNode) useKey(id uint32) error {
	return d.changeKeys(func(g *group.Group) error { return g.UseKey(id) })
}
func (d daemonNode) removeKey(id uint32) error {
	return d.changeKeys(func(g *group.Group) error { return g.RemoveKey(id) })
}

func (d daemonNode) changeKeys(change func(*group.Group) error) error {
	g, ok := mcnode.Unwrap(d.Locker).(*group.Group)
	if !ok {
		return errQuorumKeys
	}
	if err := change(g); err != nil {
		if errors.Is(err, group.ErrNoKey) {
			return errNoKeys
		}
		return err
	}
	if d.keyfile == "" {
		return nil
	}
	keys, err := g.KeyRing()
	if err == nil {
		err = seal.ReplaceKeyFile(d.keyfile, keys...)
	}
	if err != nil {
		return fmt.Errorf("the running node has the change, but the key file was not rewritten (a restart would undo it): %w", err)
	}
	return nil
}

func keysCommand() *cli.Command {
	do := func(c *cli.Context, req request) error {
		d, err := dialDaemon(socketPath(c))
		if err != nil {
			return &exitError{code: 1, err: fmt.Errorf("no mcnode run daemon for group %q: %w", c.String("group"), err)}
		}
		defer d.Close()
		if err := d.send(req); err != nil {
			return &exitError{code: 1, err: err}
		}
		r, err := d.receive()
		if err != nil {
			return &exitError{code: 1, err: err}
		}
		if !r.OK {
			return &exitError{code: 1, err: fmt.Errorf("daemon: %s", r.Error)}
		}
		for i, id := range r.Keys {
			note := ""
			if i == 0 {
				note = "  (seals)"
			}
			fmt.Printf("%s%s\n", id, note)
		}
		return nil
	}
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
		if _, err := seal.ParseID(id); err != nil {
			return "", usage("%v", err)
		}
		return id, nil
	}
	return &cli.Command{
		Name:  "keys",
		Usage: "list and rotate the group keys of the local daemon",
		Description: "Changes the keys of the running `mcnode run` daemon, and rewrites its --keyfile\n" +
			"so that a restart keeps them. Rotate a group's key in three steps, each done\n" +
			"on every member before the next, and no datagram is lost:\n" +
			"  mcnode keygen new.key                  (copy new.key to every member)\n" +
			"  mcnode keys install new.key            (every member: accept the new key)\n" +
			"  mcnode keys use NEWID                  (every member: seal with it)\n" +
			"  mcnode keys remove OLDID               (every member: refuse the old one)\n" +
			"A member that seals with a key the others lack is cut off from them until\n" +
			"they install it.",
		OnUsageError: onUsageError,
		Subcommands: []*cli.Command{
			withCommon(&cli.Command{Name: "list", Usage: "list the key IDs, the one sealing first",
				Action: func(c *cli.Context) error { return do(c, request{Op: "keys"}) }}),
			withCommon(&cli.Command{Name: "install", Usage: "accept a new key, read from a key file made by mcnode keygen", ArgsUsage: "KEYFILE",
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
					return do(c, request{Op: "key-install", Key: keys[0].Encode()})
				}}),
			withCommon(&cli.Command{Name: "use", Usage: "seal with an installed key", ArgsUsage: "ID",
				Action: func(c *cli.Context) error {
					id, err := oneID(c, "the ID of the key to seal with")
					if err != nil {
						return err
					}
					return do(c, request{Op: "key-use", ID: id})
				}}),
			withCommon(&cli.Command{Name: "remove", Usage: "stop accepting a key (not the one sealing)", ArgsUsage: "ID",
				Action: func(c *cli.Context) error {
					id, err := oneID(c, "the ID of the key to remove")
					if err != nil {
						return err
					}
					return do(c, request{Op: "key-remove", ID: id})
				}}),
		},
	}
}
