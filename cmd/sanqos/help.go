package main

import (
	"fmt"
	"strings"

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
{{exitStatus}}{{end}}

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
	cobra.AddTemplateFunc("exitStatus", func() string { return exitStatusHelp })
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

// completionHelp gives cobra's generated completion commands the same
// Long/Example shape as ours.
func completionHelp(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = `  sanqos completion bash > /etc/bash_completion.d/sanqos
  sanqos completion zsh > "${fpath[1]}/_sanqos"
  sanqos completion fish > ~/.config/fish/completions/sanqos.fish
  # 'make install' installs all three`
		for _, s := range c.Commands() {
			s.Example = "  sanqos completion " + s.Name() + " > FILE   # see 'sanqos completion --help'"
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
