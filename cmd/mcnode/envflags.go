package main

import (
	"flag"
	"fmt"
	"slices"

	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"
)

// urfave/cli reads a flag's environment variable as it sets the flag up
// (Flag.Apply), before it looks at the command line, and a value that does
// not parse (MCNODE_HEARTBEAT=abc) fails the command right there: before it
// sees --help, and, when completing, with a panic in the library. So the
// flags that parse their value (numbers, durations, booleans) set up
// without a value that does not parse, and the command refuses to run
// with it: help and completion work whatever the environment holds, and a
// command that runs still stops at the bad value, naming the variable.

// deferEnvErrors gives every command's flags that parse their environment
// variable (and the app's) to envCheckedFlag, and the command a Before that
// refuses a value that did not parse, with status 2, ahead of its own.
func deferEnvErrors(app *cli.App) {
	app.Flags, app.Before = deferEnvErrorsOf(app.Flags, app.Before)
	var walk func([]*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, cmd := range cmds {
			cmd.Flags, cmd.Before = deferEnvErrorsOf(cmd.Flags, cmd.Before)
			walk(cmd.Subcommands)
		}
	}
	walk(app.Commands)
}

func deferEnvErrorsOf(flags []cli.Flag, before cli.BeforeFunc) ([]cli.Flag, cli.BeforeFunc) {
	var checked []*envCheckedFlag
	flags = slices.Clone(flags)
	for i, f := range flags {
		if cf := envChecked(f); cf != nil {
			flags[i] = cf
			checked = append(checked, cf)
		}
	}
	if len(checked) == 0 {
		return flags, before
	}
	return flags, func(c *cli.Context) error {
		for _, f := range checked {
			if f.err != nil {
				return onUsageError(c, f.err, true)
			}
		}
		if before != nil {
			return before(c)
		}
		return nil
	}
}

// envCheckedFlag is a flag that parses the value of its environment
// variable, set up without that value when it does not parse.
type envCheckedFlag struct {
	urfaveFlag           // the flag, as help, completion and the config file see it
	envVars    *[]string // its EnvVars, emptied while it is set up again without them
	// err is why the value of its environment variable did not parse, at
	// the last set-up (nil: it did, or there was none).
	err error
}

// urfaveFlag is what urfave/cli asks of a flag beyond cli.Flag: for help
// (DocGenerationFlag, CategorizableFlag), required flags and flag actions.
type urfaveFlag interface {
	cli.DocGenerationFlag
	cli.CategorizableFlag
	cli.RequiredFlag
	cli.ActionableFlag
}

// envChecked is f as an envCheckedFlag, or nil for a flag that reads no
// environment variable or takes any value it holds (a string).
func envChecked(f cli.Flag) *envCheckedFlag {
	var env *[]string
	switch g := f.(type) {
	case *cli.StringFlag, *altsrc.StringFlag:
		return nil
	case *cli.BoolFlag:
		env = &g.EnvVars
	case *altsrc.BoolFlag:
		env = &g.EnvVars
	case *cli.IntFlag:
		env = &g.EnvVars
	case *altsrc.IntFlag:
		env = &g.EnvVars
	case *cli.Int64Flag:
		env = &g.EnvVars
	case *altsrc.Int64Flag:
		env = &g.EnvVars
	case *cli.DurationFlag:
		env = &g.EnvVars
	case *altsrc.DurationFlag:
		env = &g.EnvVars
	default:
		if d, ok := f.(cli.DocGenerationFlag); ok && len(d.GetEnvVars()) > 0 {
			panic(fmt.Sprintf("mcnode: flag %v of type %T reads %v, and a value that does not parse would fail its command's --help", f.Names(), f, d.GetEnvVars()))
		}
		return nil
	}
	if len(*env) == 0 {
		return nil
	}
	return &envCheckedFlag{urfaveFlag: f.(urfaveFlag), envVars: env}
}

// Apply sets the flag up, from its environment variable if that parses,
// else as if the variable were unset, keeping why for the command's Before.
// (Apply fails only on that value: the command line is parsed after it, by
// the flag set.)
func (f *envCheckedFlag) Apply(set *flag.FlagSet) error {
	f.err = f.urfaveFlag.Apply(set)
	if f.err == nil {
		return nil
	}
	vars := *f.envVars
	*f.envVars = nil
	defer func() { *f.envVars = vars }()
	return f.urfaveFlag.Apply(set)
}
