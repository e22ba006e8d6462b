package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode/group/fence"
)

// Exit statuses of mcnode fence, besides exitUsage. 4 is one mcnode lock
// does not use, so that a script can tell a broken fence file from a stale
// token or a lock that was not acquired.
const (
	exitStale   = 1 // a higher token was already seen
	exitFenceIO = 4 // FILE cannot be read or written, or is not a fence file
)

const fenceExitStatus = "Exit status: 0 if TOKEN is accepted (and recorded); 1 if it is stale (a higher\n" +
	"token was already seen); 2 for usage errors (a missing argument, TOKEN not a\n" +
	"positive 64-bit integer); 4 if FILE cannot be read or written, or is not a fence\n" +
	"file (mcnode lock never exits 4 itself, so the status is unambiguous under it)."

func fenceCommand() *cli.Command {
	return &cli.Command{
		Name:      "fence",
		Usage:     "refuse a stale lock holder at the guarded resource, by its fencing token",
		ArgsUsage: "check FILE TOKEN | show FILE",
		Description: "A holder paused past its lease (a GC pause, SIGSTOP, a suspended VM) wakes up\n" +
			"still believing it holds the lock, after the group has handed it on. Only the\n" +
			"resource can stop its writes: each grant's fencing token ($MCNODE_TOKEN under\n" +
			"mcnode lock) is higher than the last, so the resource refuses a token lower\n" +
			"than one it has already seen (Kleppmann, \"How to do distributed locking\", 2016).\n\n" +
			"`mcnode fence check FILE TOKEN` is that check, with FILE, kept with the resource,\n" +
			"as the record of the highest token seen: it accepts TOKEN if no higher one is\n" +
			"recorded, and records it (fsynced); otherwise it fails and changes nothing. An\n" +
			"equal token is accepted (the same holder writing again). FILE is created with\n" +
			"mode 0600 if missing; a flock serializes concurrent checks on it.\n" +
			"`mcnode fence show FILE` prints the highest token recorded (0 if none;\n" +
			"status 4 if FILE's directory does not exist, as for check).\n\n" +
			"  mcnode lock db -- sh -c 'mcnode fence check /srv/db/fence \"$MCNODE_TOKEN\" && ./write-db.sh'\n\n" +
			"Checking in one process and writing in another is not atomic: a holder can pass\n" +
			"the check, pause, and write after a newer holder has. That narrows the window to\n" +
			"the gap between check and write; to close it, the resource must check where it\n" +
			"writes, under the same lock (the Go package group/fence).\n\n" +
			fenceExitStatus,
		Subcommands: []*cli.Command{
			{
				Name:      "check",
				Usage:     "accept TOKEN and record it in FILE, or fail if a higher token was seen",
				ArgsUsage: "FILE TOKEN",
				Description: "Accepts TOKEN if it is at least the highest token recorded in FILE, records\n" +
					"it (fsynced) and exits 0; otherwise says so on stderr and exits 1, changing\n" +
					"nothing. FILE is created with mode 0600 if missing. See mcnode fence --help.\n\n" +
					"  mcnode lock db -- sh -c 'mcnode fence check /srv/db/fence \"$MCNODE_TOKEN\" && ./write-db.sh'\n\n" +
					fenceExitStatus,
				OnUsageError: fenceUsageError,
				Action:       fenceCheckAction,
			},
			{
				Name:      "show",
				Usage:     "print the highest token recorded in FILE (0 if none)",
				ArgsUsage: "FILE",
				Description: "Prints the highest token recorded in FILE, 0 if FILE does not exist.\n\n" +
					"Exit status: 0; 2 for usage errors; 4 if FILE cannot be read or is not a fence file.",
				OnUsageError: fenceUsageError,
				Action:       fenceShowAction,
			},
		},
		HideHelpCommand: true,
		OnUsageError:    onUsageError,
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return usage("usage: mcnode fence check FILE TOKEN | mcnode fence show FILE")
			}
			return usage("unknown fence command %q: want check or show", c.Args().First())
		},
	}
}

// fenceUsageError is onUsageError for the subcommands, which names them in
// full ("mcnode fence check", not "mcnode check").
func fenceUsageError(c *cli.Context, err error, _ bool) error {
	return &exitError{code: exitUsage, err: fmt.Errorf("%v (see %s --help)", err, c.Command.HelpName)}
}

func fenceCheckAction(c *cli.Context) error {
	if c.NArg() != 2 {
		return usage("usage: mcnode fence check FILE TOKEN")
	}
	path, arg := c.Args().Get(0), c.Args().Get(1)
	if path == "" {
		return usage("FILE is empty: name the fence file")
	}
	// Tokens start at 1; an empty TOKEN is most likely an unset $MCNODE_TOKEN.
	token, err := strconv.ParseUint(arg, 10, 64)
	if err != nil || token == 0 {
		return usage("TOKEN %q: want a fencing token, an integer from 1 to %d ($MCNODE_TOKEN under mcnode lock)", arg, uint64(math.MaxUint64))
	}
	switch err := fence.Check(path, token); {
	case err == nil:
		return nil
	case errors.Is(err, fence.ErrStale):
		return &exitError{code: exitStale, err: err}
	default:
		return &exitError{code: exitFenceIO, err: err}
	}
}

func fenceShowAction(c *cli.Context) error {
	if c.NArg() != 1 || c.Args().First() == "" {
		return usage("usage: mcnode fence show FILE")
	}
	h, err := fence.Highest(c.Args().First())
	if err != nil {
		return &exitError{code: exitFenceIO, err: err}
	}
	_, err = fmt.Fprintln(c.App.Writer, h)
	return err
}
