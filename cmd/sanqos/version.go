package main

import (
	"fmt"

	"github.com/sanqos/sanqos/internal/version"
	"github.com/spf13/cobra"
)

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version",
		Long:    "Prints the version the binary was built from (git describe, set by make build).",
		Example: "  sanqos version",
		Args:    cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "sanqos", version.String())
		},
	}
}
