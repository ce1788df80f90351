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
	c.AddCommand(configCheckCmd())
	return c
}

func configCheckCmd() *cobra.Command {
	var allowNone bool
	c := &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a config file as a whole without applying it",
		Long: `Parses and validates FILE as the agent would at start or on SIGHUP, and
prints a one-line summary. Exits 3 with every problem (key and line) if it
is invalid: an unknown key names the nearest one, a value the kind it
should be. Run it before 'systemctl reload sanqos'.

A file without resources (an empty one included) is refused too, although
the agent would start with it: it would protect nothing, which is most
likely a wrong or truncated file. A cluster member whose resources come
from the cluster policy passes --allow-no-resources.`,
		Example: `  sanqos config check /etc/sanqos/sanqos.yaml
  sanqos config check examples/sanqos.yaml
  sanqos config check --allow-no-resources /etc/sanqos/member.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(args[0])
			if err != nil {
				return err
			}
			if err := cfg.NoResources(); err != nil && !allowNone {
				return configError{fmt.Errorf("%s: %w", args[0], err)}
			}
			thr := cfg.Threshold.String()
			if cfg.ThresholdAuto {
				thr = "auto"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%d resources, backend %s, threshold %s, interval %v)\n",
				args[0], len(cfg.Resources), cfg.Backend, thr, cfg.Interval)
			for _, w := range cfg.Warnings {
				fmt.Fprintf(cmd.OutOrStdout(), "warning: %s\n", w)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&allowNone, "allow-no-resources", false, "accept a file without resources (a cluster member's, whose resources come from the cluster policy)")
	return c
}
