package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// The completion scripts ask mcnode itself for the words that fit (urfave/
// cli's --generate-bash-completion), with the words typed so far. Never
// once the line holds "--", the word being completed included: after it
// come a command and its arguments (mcnode lock NAME -- CMD), and
// urfave/cli, seeing "--", would run the command rather than complete it.
// There the shell completes file names as usual.
const bashCompletion = `# mcnode completion for bash: source <(mcnode completion bash)
_mcnode_complete() {
	COMPREPLY=()
	local cur=${COMP_WORDS[COMP_CWORD]} w
	for w in "${COMP_WORDS[@]:1:COMP_CWORD}"; do
		[[ $w == -- ]] && return 0
	done
	local words
	if [[ $cur == -* ]]; then
		words=$("${COMP_WORDS[0]}" "${COMP_WORDS[@]:1:COMP_CWORD-1}" "$cur" --generate-bash-completion 2>/dev/null)
	else
		words=$("${COMP_WORDS[0]}" "${COMP_WORDS[@]:1:COMP_CWORD-1}" --generate-bash-completion 2>/dev/null)
	fi
	COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o bashdefault -o default -F _mcnode_complete mcnode
`

const zshCompletion = `#compdef mcnode
# mcnode completion for zsh: source <(mcnode completion zsh)
_mcnode() {
	local cur=${words[CURRENT]} w
	for w in "${(@)words[2,CURRENT]}"; do
		[[ $w == -- ]] && { _files; return }
	done
	local -a opts
	if [[ $cur == -* ]]; then
		opts=("${(@f)$(${words[1]} "${(@)words[2,CURRENT-1]}" "$cur" --generate-bash-completion 2>/dev/null)}")
	else
		opts=("${(@f)$(${words[1]} "${(@)words[2,CURRENT-1]}" --generate-bash-completion 2>/dev/null)}")
	fi
	compadd -- "${(@)opts%%:*}"
}
compdef _mcnode mcnode
`

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: "Load it in the current shell, or install it:\n\n" +
			"   source <(mcnode completion bash)     # or put it in /etc/bash_completion.d/mcnode\n" +
			"   source <(mcnode completion zsh)      # or save it as _mcnode in your $fpath\n" +
			"   mcnode completion fish > ~/.config/fish/completions/mcnode.fish",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usage("want one shell: bash, zsh or fish")
			}
			switch shell := c.Args().First(); shell {
			case "bash":
				fmt.Print(bashCompletion)
			case "zsh":
				fmt.Print(zshCompletion)
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return &exitError{code: 1, err: err}
				}
				fmt.Print(s)
			default:
				return usage("shell %q: want bash, zsh or fish", shell)
			}
			return nil
		},
	}
}
