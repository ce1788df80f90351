package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/sanqos/sanqos/config"

	"github.com/spf13/cobra"
)

// manHelp lays out --help like a man page: NAME, SYNOPSIS, DESCRIPTION,
// EXAMPLES, OPTIONS, COMMANDS, EXIT STATUS (the root's page only), SEE
// ALSO. Every command has a Long and an Example (TestEveryCommandHasHelp),
// so no section is ever empty.
const manHelp = `NAME
    {{.CommandPath}} - {{.Short}}

SYNOPSIS
{{- if and .Runnable (or (not .HasAvailableSubCommands) (ne .Use .Name))}}
    {{.UseLine}}{{end}}
{{- if .HasAvailableSubCommands}}
    {{.CommandPath}} COMMAND [flags]{{end}}

DESCRIPTION
{{indent (or .Long .Short)}}
{{- if .HasExample}}

EXAMPLES
{{.Example}}{{end}}
{{- if .HasAvailableLocalFlags}}

OPTIONS
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}
{{- if .HasAvailableInheritedFlags}}

INHERITED OPTIONS
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}
{{- if .HasAvailableSubCommands}}

COMMANDS{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
    {{rpad .Name .NamePadding}} {{.Short}}{{end}}{{end}}

    Run '{{.CommandPath}} COMMAND --help' for a command's page.{{end}}
{{- if not .HasParent}}

EXIT STATUS
{{exitStatus .}}{{end}}

SEE ALSO
    {{seeAlso .}}
`

func init() {
	cobra.AddTemplateFunc("indent", func(s string) string {
		lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
		for i, l := range lines {
			if l != "" {
				lines[i] = "    " + l
			}
		}
		return strings.Join(lines, "\n")
	})
	cobra.AddTemplateFunc("exitStatus", ExitStatus)
	cobra.AddTemplateFunc("seeAlso", func(c *cobra.Command) string {
		var out []string
		if c.HasParent() {
			out = append(out, c.Parent().CommandPath())
		}
		if c.HasParent() {
			for _, s := range c.Parent().Commands() {
				if s != c && s.IsAvailableCommand() {
					out = append(out, s.CommandPath())
				}
			}
		}
		if len(out) == 0 {
			return "README.md (the lab, the agent, known limitations), examples/sanqos.yaml, docs/cli.md (exit statuses, renamed flags)"
		}
		return strings.Join(out, ", ")
	})
}

// exitStatusKey is the root's annotation holding its EXIT STATUS section.
const exitStatusKey = "exit-status"

// Setup finishes a binary's command tree: the man-style help page, whose
// root page ends with the exit statuses (plus exitStatus, the binary's
// own lines), the completion and help commands, and usage errors
// everywhere (WireUsage).
func Setup(root *cobra.Command, exitStatus string) {
	root.Annotations = map[string]string{exitStatusKey: strings.TrimRight(exitStatusHelp+"\n"+exitStatus, "\n")}
	completionHelp(root)
	root.SetHelpCommand(HelpCmd())
	WireUsage(root)
	root.SetHelpTemplate(manHelp)
}

// ExitStatus is the EXIT STATUS section of c's binary.
func ExitStatus(c *cobra.Command) string { return c.Root().Annotations[exitStatusKey] }

// Main runs root with the process's arguments and exits with the status
// of what it returned, having said why it failed.
func Main(root *cobra.Command) {
	cmd, err := root.ExecuteC()
	if err == nil {
		return
	}
	PrintError(os.Stderr, cmd, err)
	os.Exit(ExitCode(err))
}

// PrintError says why cmd failed.
func PrintError(w io.Writer, cmd *cobra.Command, err error) {
	name := cmd.Root().Name()
	switch {
	case errors.As(err, new(ExitCodeError)):
		// The command's own status; its output said why.
	case errors.As(err, new(config.Errors)):
		// A config's errors, one a line, each FILE:LINE: first, as a
		// compiler prints them, for editors and grep.
		fmt.Fprintln(w, err)
	case ExitCode(err) == ExitUsage:
		sep := "\n"
		if strings.Contains(err.Error(), "\n") {
			sep = "\n\n" // after a list of suggestions
		}
		fmt.Fprintf(w, "%s: %v%s%sRun '%s --help' for usage.\n", name, err, sep, movedHint(cmd.Root(), err), cmd.CommandPath())
	default:
		fmt.Fprintf(w, "%s: %v\n", name, err)
	}
}

// completionHelp gives cobra's generated completion commands the same
// Long/Example shape as ours.
func completionHelp(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = strings.ReplaceAll(`  sanqos completion bash > /etc/bash_completion.d/sanqos
  sanqos completion zsh > "${fpath[1]}/_sanqos"
  sanqos completion fish > ~/.config/fish/completions/sanqos.fish`, "sanqos", root.Name())
		if root.Name() == "sanqos" { // the product's, not the lab tools'
			c.Example += "\n  # 'make install' installs all three"
		}
		for _, s := range c.Commands() {
			s.Example = "  " + root.Name() + " completion " + s.Name() + " > FILE   # see '" + root.Name() + " completion --help'"
			// cobra's own RunE writes to the stdout it saw at init time;
			// this one honours SetOut (tests, embedding).
			sh := s.Name()
			s.RunE = func(cmd *cobra.Command, _ []string) error {
				noDesc, _ := cmd.Flags().GetBool("no-descriptions")
				out, root := cmd.OutOrStdout(), cmd.Root()
				switch sh {
				case "bash":
					return root.GenBashCompletionV2(out, !noDesc)
				case "zsh":
					if noDesc {
						return root.GenZshCompletionNoDesc(out)
					}
					return root.GenZshCompletion(out)
				case "fish":
					return root.GenFishCompletion(out, !noDesc)
				case "powershell":
					if noDesc {
						return root.GenPowerShellCompletion(out)
					}
					return root.GenPowerShellCompletionWithDesc(out)
				}
				return fmt.Errorf("no completion for %s", sh)
			}
		}
	}
}

// movedKey is the root annotation naming the binary a command moved to.
const movedKey = "sanqos.moved:"

// Moved records that the commands names now live in binary, so that a
// habit from before the split ('sanqos lab up') is told where to go
// instead of only "unknown command".
func Moved(root *cobra.Command, binary string, names ...string) {
	if root.Annotations == nil {
		root.Annotations = map[string]string{}
	}
	for _, n := range names {
		root.Annotations[movedKey+n] = binary
	}
}

// movedHint is the line naming the binary that has the unknown command
// err complains about, or "".
func movedHint(root *cobra.Command, err error) string {
	rest, ok := strings.CutPrefix(err.Error(), "unknown command ")
	if !ok {
		return ""
	}
	q, qerr := strconv.QuotedPrefix(rest)
	if qerr != nil {
		return ""
	}
	name, _ := strconv.Unquote(q)
	bin := root.Annotations[movedKey+name]
	if bin == "" {
		return ""
	}
	return fmt.Sprintf("'%s' is in %s, the lab tools, which a target host does not install: run '%s %s ...' (go build -o bin/ ./cmd/%s).\n", name, bin, bin, name, bin)
}
