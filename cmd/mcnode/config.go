package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"
)

// withConfig lets a command's flags come from a TOML file too (--config,
// MCNODE_CONFIG): each setting by its flag's name, as in
// docs/mcnode.toml. A flag on the command line or its environment
// variable wins over the file, the file over the default. One file can
// serve every command: a setting that is some other command's flag is
// left alone, but one that is no command's flag is an error, so that a
// typo does not pass unnoticed.
func withConfig(cmd *cli.Command, known func() map[string]bool) *cli.Command {
	flags := make([]cli.Flag, 0, len(cmd.Flags)+1)
	for _, f := range cmd.Flags {
		flags = append(flags, sourced(f))
	}
	flags = append(flags, &cli.StringFlag{Name: "config", EnvVars: []string{"MCNODE_CONFIG"},
		Usage: "TOML file of settings, each by its flag's name (see docs/mcnode.toml); flags and environment variables win over it"})
	cmd.Flags = flags
	load := altsrc.InitInputSourceWithContext(flags, func(c *cli.Context) (altsrc.InputSourceContext, error) {
		if path := c.String("config"); path != "" {
			return altsrc.NewTomlSourceFromFile(path)
		}
		return altsrc.NewMapInputSource("", map[any]any{}), nil
	})
	cmd.Before = func(c *cli.Context) error {
		// What the command line and the environment set, before the file
		// sets the rest: onCommandLine tells them apart.
		typed := map[string]bool{}
		for _, f := range c.Command.Flags {
			if name := f.Names()[0]; c.IsSet(name) {
				typed[name] = true
			}
		}
		c.Context = context.WithValue(c.Context, beforeConfigKey{}, typed)
		if path := c.String("config"); path != "" {
			if err := checkConfig(path, known()); err != nil {
				return usage("--config %v", err)
			}
		}
		if err := load(c); err != nil {
			msg := err.Error()
			if strings.Contains(msg, "Expected 'duration'") {
				msg += ` (a duration is a string: "10ms", "1.5s")`
			}
			return usage("--config %s: %s", c.String("config"), msg)
		}
		return nil
	}
	return cmd
}

// beforeConfigKey keys, in a command's context, the flags set before its
// --config file was read.
type beforeConfigKey struct{}

// checkConfig refuses a config file with a setting no command has.
func checkConfig(path string, known map[string]bool) error {
	var settings map[string]any
	if _, err := toml.DecodeFile(path, &settings); err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("%s: %w", path, pe.Err)
		}
		return fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "toml: "))
	}
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		if !known[k] || len(k) == 1 || k == "config" || k == "help" {
			return fmt.Errorf("%s: unknown setting %q: the settings are the flags' long names (mcnode COMMAND --help)", path, k)
		}
	}
	return nil
}

// sourced is f, able to take its value from the config file.
func sourced(f cli.Flag) cli.Flag {
	switch f := f.(type) {
	case *cli.StringFlag:
		return altsrc.NewStringFlag(f)
	case *cli.IntFlag:
		return altsrc.NewIntFlag(f)
	case *cli.Int64Flag:
		return altsrc.NewInt64Flag(f)
	case *cli.BoolFlag:
		return altsrc.NewBoolFlag(f)
	case *cli.DurationFlag:
		return altsrc.NewDurationFlag(f)
	}
	panic(fmt.Sprintf("mcnode: flag %v of type %T cannot come from the config file", f.Names(), f))
}

// flagNamesOf lists every flag name of the commands and their
// subcommands.
func flagNamesOf(cmds []*cli.Command) map[string]bool {
	names := map[string]bool{}
	for _, cmd := range cmds {
		for _, f := range cmd.Flags {
			for _, n := range f.Names() {
				names[n] = true
			}
		}
		maps.Copy(names, flagNamesOf(cmd.Subcommands))
	}
	return names
}
