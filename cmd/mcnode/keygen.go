package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/mcnode/mcnode/seal"
)

func keygenCommand() *cli.Command {
	return &cli.Command{
		Name:      "keygen",
		Usage:     "make a new group key",
		ArgsUsage: "[FILE|-]",
		Description: "Writes a new random group key to FILE (created with mode 0600; an existing\n" +
			"file is not replaced), or prints it to standard output without FILE or with -\n" +
			"(./- names a file called -), one line as in a key file. Give every member of\n" +
			"the group the same file with --keyfile: their datagrams are then authenticated\n" +
			"and encrypted (XChaCha20-Poly1305), and anything that does not authenticate is\n" +
			"dropped. A key file must be readable by its owner alone (chmod 600).",
		OnUsageError: onUsageError,
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usage("keygen takes at most one argument, the file to write")
			}
			k, err := seal.GenerateKey()
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			if c.NArg() == 0 || c.Args().First() == "-" {
				// The secret itself, as a key file's line: fmt's %v of a
				// Key names it without the secret. "-" is standard
				// output, as for most commands that write a file.
				fmt.Println(k.Encode())
				return nil
			}
			if err := seal.WriteKeyFile(c.Args().First(), k); err != nil {
				return &exitError{code: 1, err: err}
			}
			fmt.Fprintf(os.Stderr, "wrote key %s to %s\n", seal.FormatID(k.ID()), c.Args().First())
			return nil
		},
	}
}
