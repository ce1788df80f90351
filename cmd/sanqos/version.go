package main

import (
	"encoding/json"
	"fmt"

	"github.com/sanqos/sanqos/internal/version"
	"github.com/spf13/cobra"
)

func versionCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Long: `Prints the version the binary was built from (git describe, set by make
build) and its commit. --json prints one object with version, commit (the
full revision, "" when the build recorded none), go_version, os and arch:
the Debian package takes its version from it.`,
		Example: `  sanqos version
  sanqos version --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !asJSON {
				fmt.Fprintln(cmd.OutOrStdout(), "sanqos", version.String())
				return nil
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(version.Get())
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print version, commit, go_version, os and arch as one JSON object")
	return c
}
