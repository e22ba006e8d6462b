// Command mcnode runs nodes of an mcnode group on a LAN and takes locks from
// scripts. See mcnode --help, and the README.
package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// exitError carries an exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

// Unwrap gives the error behind the exit status, so that errors.Is sees a
// cause (a cancelled join, say) through it.
func (e *exitError) Unwrap() error { return e.err }

// Exit statuses of mcnode itself (mcnode lock otherwise exits with its
// command's status).
const (
	exitNotAcquired = 1 // the lock was not acquired (timeout, or held with --nonblock)
	exitUsage       = 2 // bad flags or arguments
	exitLost        = 3 // the lock was lost while the command ran
	// exitNoGroup: mcnode lock found no group to ask: no local daemon, and
	// no member answered or no --interface to ask one on
	// (noDaemonNoInterface); a daemon of another group; or, with
	// --nonblock, a daemon not a member of its group yet, a group that
	// cannot decide (no majority) or a daemon that does not answer.
	// (Without --nonblock a lock waits for those within --timeout, and
	// exits 1 when it runs out.) A script tells it apart from a lock held
	// elsewhere (1).
	exitNoGroup  = 4
	exitNotFound = 127
	exitNotExec  = 126
)

func main() {
	if _, ok := os.LookupEnv(guardEnv); ok {
		// The guard of an mcnode lock (see guard.go), before any flag,
		// config file or help is looked at.
		os.Exit(runGuard(os.Args))
	}
	app := newApp()
	err := app.Run(os.Args)
	var ee *exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintf(os.Stderr, "mcnode: %s\n", unprefixed(ee.err))
		}
		os.Exit(ee.code)
	default:
		fmt.Fprintf(os.Stderr, "mcnode: %s\n", unprefixed(err))
		os.Exit(1)
	}
}

// unprefixed is err's message without the "mcnode: " the package mcnode
// puts before its own, which main's would double.
func unprefixed(err error) string {
	return strings.TrimPrefix(err.Error(), "mcnode: ")
}

// onUsageError reports a bad flag or argument in one line.
func onUsageError(c *cli.Context, err error, _ bool) error {
	// HelpName is the command's full name, "mcnode lock", and the app's
	// own at the top level, where the command is the app, named "mcnode".
	cmd := "mcnode"
	if c.Command != nil && c.Command.HelpName != "" {
		cmd = c.Command.HelpName
	}
	return &exitError{code: exitUsage, err: fmt.Errorf("%v (see %s --help)", err, cmd)}
}

// unknownCommand is the action of a command that only has subcommands (the
// app itself, named cmd): with no argument it shows the help; with one it
// names no subcommand, which is a usage error (the library would print "No
// help topic" and exit 1).
func unknownCommand(cmd string) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() == 0 {
			return cli.ShowSubcommandHelp(c)
		}
		if c.Args().First() == "help" { // there is no help command, but the habit
			if c.NArg() > 1 && cmd == "mcnode" {
				if c.App.Command(c.Args().Get(1)) == nil {
					return usage("unknown command %q (see mcnode --help)", c.Args().Get(1))
				}
				return cli.ShowCommandHelp(c, c.Args().Get(1))
			}
			return cli.ShowSubcommandHelp(c)
		}
		if cmd == "mcnode" {
			return usage("unknown command %q (see mcnode --help)", c.Args().First())
		}
		return usage("unknown command %q for %s (see %s --help)", c.Args().First(), cmd, cmd)
	}
}

// noArguments refuses arguments to a command that takes none. Flags after
// an argument are not parsed, so "mcnode run -i lo build-farm" would
// otherwise quietly run in the default group.
func noArguments(c *cli.Context) error {
	if c.Args().Present() {
		return usage("%s takes no arguments, got %q (flags go before any argument)", strings.TrimPrefix(c.Command.HelpName, "mcnode "), c.Args().First())
	}
	return nil
}

// withCommon gives a command the shared group and logging flags, after its
// own, and one-line usage errors.
func withCommon(cmd *cli.Command) *cli.Command {
	cmd.Flags = append(append(cmd.Flags, commonFlags()...), modeFlags()...)
	cmd.OnUsageError = onUsageError
	return cmd
}

// withoutFlags drops the shared flags withCommon gave cmd that it does not
// take, so that one given is an unknown flag rather than quietly ignored.
func withoutFlags(cmd *cli.Command, names ...string) *cli.Command {
	cmd.Flags = slices.DeleteFunc(cmd.Flags, func(f cli.Flag) bool { return slices.Contains(names, f.Names()[0]) })
	return cmd
}

// withGroupDefault gives a command a --group default of its own (the game
// must not join the locks' group, by default or through MCNODE_GROUP).
func withGroupDefault(cmd *cli.Command, group string) *cli.Command {
	for _, f := range cmd.Flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == "group" {
			sf.Value = group
			// MCNODE_GROUP names the group the user's locks live in: a
			// game started from the same shell must not join it.
			sf.EnvVars = nil
		}
	}
	return cmd
}

func newApp() *cli.App {
	app := &cli.App{
		Name:  "mcnode",
		Usage: "distributed locks for a LAN over IP multicast (rotating-arbiter mutual exclusion)",
		Description: "Nodes join a multicast group and share named locks. One member at a time is the\n" +
			"server; it grants locks by multicasting its decisions, and the role rotates.\n" +
			"Every flag can also be set by the environment variable shown with it, or, for\n" +
			"run, lock, status and keys, in a --config file (docs/mcnode.toml).",
		Commands: []*cli.Command{
			withCommon(runCommand()),
			withCommon(lockCommand()),
			withCommon(statusCommand()),
			asDemo(withCommon(demoCommand())),
			// A game keeps no state and serves no local client.
			withGroupDefault(withoutFlags(withCommon(gameCommand()), "socket", "state-dir"), "mcnode-game"),
			benchCommand(),
			fenceCommand(),
			keygenCommand(),
			keysCommand(),
			completionCommand(),
			versionCommand(),
		},
		Version:              version(),
		EnableBashCompletion: true,
		OnUsageError:         onUsageError,
		HideHelpCommand:      true,
		ExitErrHandler:       func(*cli.Context, error) {},
		Action:               unknownCommand("mcnode"),
	}
	// Every command that talks to the configured group takes its flags from
	// --config too; the demo and the game make groups of their own, which a
	// shared config file (its group, interface, key) must not turn into the
	// production group.
	known := func() map[string]bool { return flagNamesOf(app.Commands) }
	var configure func(cmds []*cli.Command)
	configure = func(cmds []*cli.Command) {
		for _, cmd := range cmds {
			if cmd.Name != "demo" && cmd.Name != "game" &&
				slices.ContainsFunc(cmd.Flags, func(f cli.Flag) bool { return slices.Contains(f.Names(), "group") }) {
				withConfig(cmd, known)
			}
			configure(cmd.Subcommands)
		}
	}
	configure(app.Commands)
	deferEnvErrors(app)
	return app
}
