package main

import (
	"fmt"

	"github.com/sanqos/sanqos/config"
	"github.com/spf13/cobra"
)

func configCmd() *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "Work with agent configuration files",
		Long: `The agent's configuration is one YAML file (installed at
/etc/sanqos/sanqos.yaml; every field is documented in examples/sanqos.yaml).
It is validated as a whole: every error is reported with its field and line,
and nothing is applied unless all of it is valid.`,
		Example: "  sanqos config check /etc/sanqos/sanqos.yaml"}
	c.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate a config file as a whole without applying it",
		Long: `Parses and validates FILE as the agent would at start or on SIGHUP, and
prints a one-line summary. Exits non-zero with every problem (field and
line) if it is invalid. Run it before 'systemctl reload sanqos'.`,
		Example: "  sanqos config check /etc/sanqos/sanqos.yaml\n  sanqos config check examples/sanqos.yaml",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%d resources, backend %s, threshold %v, interval %v)\n",
				args[0], len(cfg.Resources), cfg.Backend, cfg.Threshold, cfg.Interval)
			for _, w := range cfg.Warnings {
				fmt.Fprintf(cmd.OutOrStdout(), "warning: %s\n", w)
			}
			return nil
		},
	})
	return c
}
