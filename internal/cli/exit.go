// Package cli is the command-line plumbing both binaries share, sanqos
// (the product) and sanqos-lab (the lab tools): exit statuses and the
// errors that carry them, usage errors with suggestions, the man-style
// help page, completion commands, renamed flags, and Main, which runs a
// command tree and exits with its status.
//
// Imports (sanqos): config, internal/editdist.
package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/internal/editdist"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit statuses, one per kind of failure, so that a script can tell a
// mistake in its own command line from a bad config file and from a
// command that ran and failed. Documented on the root's help page
// (ExitStatus) and in docs/cli.md.
const (
	ExitOK      = 0
	ExitRuntime = 1 // the command ran and failed: no agent, etcd down, a probe failed
	ExitUsage   = 2 // the command line is wrong: unknown command or flag, bad argument
	ExitConfig  = 3 // a config or cluster policy is unreadable or invalid
)

// exitStatusHelp is the root page's EXIT STATUS section; a binary adds
// its own lines (Setup).
const exitStatusHelp = `    0  success
    1  the command ran and failed (no agent on the socket, etcd down, ...)
    2  usage: unknown command or flag, missing or malformed argument
    3  config: a config file or cluster policy is unreadable or invalid`

// UsageError is a mistake in the command line: exit status 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef is a usage error with a message.
func Usagef(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

// ConfigError is a config or policy that cannot be used: exit status 3.
type ConfigError struct{ Err error }

func (e ConfigError) Error() string { return e.Err.Error() }
func (e ConfigError) Unwrap() error { return e.Err }

// ExitCodeError is a status a command passes through as its own, having
// printed why (sanqos-lab's 'lab guest': the guest command's status).
type ExitCodeError int

func (e ExitCodeError) Error() string {
	return fmt.Sprintf("the command exited %d in the guest", int(e))
}

// cobraUsage are the starts of the messages of cobra's own checks that run
// before any hook of ours (finding the command, required flags, flag
// groups): usage errors too.
var cobraUsage = []string{
	"unknown command ",
	"required flag(s) ",
	"if any flags in the group ",
	"at least one of the flags in the group ",
}

// ExitCode is the process's exit status for what Execute returned.
func ExitCode(err error) int {
	var guest ExitCodeError
	var fileErr *config.FileError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &guest):
		return int(guest)
	case errors.As(err, new(UsageError)):
		return ExitUsage
	case errors.As(err, new(ConfigError)), errors.As(err, &fileErr), errors.As(err, new(config.Error)):
		return ExitConfig
	case slices.ContainsFunc(cobraUsage, func(p string) bool { return strings.HasPrefix(err.Error(), p) }):
		return ExitUsage
	}
	return ExitRuntime
}

// WireUsage makes every command's command-line mistakes usage errors:
// flag errors (with the nearest flag's name), argument counts, and an
// unknown subcommand of a command group, which cobra answers with the
// group's help and status 0 (it checks subcommands only at the root).
// A group alone still prints its help.
func WireUsage(root *cobra.Command) {
	root.SetFlagErrorFunc(flagError)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch {
		case c.HasSubCommands() && !c.Runnable():
			c.Args = unknownCommand
			c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
		case c.Args != nil:
			check := c.Args
			c.Args = func(cmd *cobra.Command, args []string) error {
				if err := check(cmd, args); err != nil {
					return UsageError{err}
				}
				return nil
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}

// unknownCommand is a group's Args: any argument is a subcommand it does
// not have. The message names the nearest ones.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := SuggestCommands(cmd, args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return Usagef("%s", msg)
}

// HelpCmd is 'sanqos help COMMAND...': cobra's own answers an unknown
// topic with the root's usage and status 0.
func HelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "help [COMMAND]...",
		Short:   "Show a command's page (the same as COMMAND --help)",
		Long:    "Prints the page of the command named by its arguments, or the root's.",
		Example: "  sanqos help throttle set",
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var out []cobra.Completion
			if cmd, _, err := c.Root().Find(args); err == nil {
				for _, s := range cmd.Commands() {
					if s.IsAvailableCommand() && strings.HasPrefix(s.Name(), toComplete) {
						out = append(out, cobra.CompletionWithDesc(s.Name(), s.Short))
					}
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil {
				return UsageError{err}
			}
			if len(rest) > 0 && cmd.HasSubCommands() {
				if err := unknownCommand(cmd, rest); err != nil {
					return err
				}
			}
			return cmd.Help()
		},
	}
}

// SuggestCommands is cobra's suggestions for a mistyped subcommand, plus
// a command typed with a flag run into it: "clear-all" → "clear --all".
func SuggestCommands(cmd *cobra.Command, typed string) []string {
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	out := cmd.SuggestionsFor(typed)
	for _, s := range cmd.Commands() {
		rest, ok := strings.CutPrefix(typed, s.Name()+"-")
		if !ok || !s.IsAvailableCommand() {
			continue
		}
		if f := s.Flags().Lookup(rest); f != nil && !f.Hidden {
			out = append(out, s.Name()+" --"+rest)
		} else {
			out = append(out, s.Name())
		}
	}
	return out
}

// flagError makes pflag's errors usage errors, naming the nearest flag
// of an unknown one.
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		if s := nearestFlag(cmd, name); s != "" {
			msg += fmt.Sprintf(" (did you mean --%s?)", s)
		}
	}
	return UsageError{errors.New(msg)}
}

// nearestFlag is the visible flag of cmd closest to name, if close enough
// to be a typo (edit distance at most 2, or a third of its length). A
// typo of a renamed flag's old name gets the new name.
func nearestFlag(cmd *cobra.Command, name string) string {
	best, bestD := "", max(2, len(name)/3)+1
	visit := func(f *pflag.Flag) {
		now := f.Name
		if f.Deprecated != "" {
			now, _ = strings.CutPrefix(f.Deprecated, "use --")
		} else if f.Hidden {
			return
		}
		if d := editdist.Distance(name, f.Name); d < bestD && now != "" {
			best, bestD = now, d
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	return best
}
