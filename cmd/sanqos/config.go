package main

import (
	"fmt"

	"github.com/sanqos/sanqos/config"
	"github.com/spf13/cobra"
)

func configCmd() *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "Work with agent configuration files"}
	c.AddCommand(&cobra.Command{
		Use:     "check FILE",
		Short:   "Validate a config file as a whole without applying it",
		Example: "  sanqos config check /etc/sanqos/sanqos.yaml\n  sanqos config check examples/sanqos.yaml",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%d resources, backend %s, threshold %v, interval %v)\n",
				args[0], len(cfg.Resources), cfg.Backend, cfg.Threshold, cfg.Interval)
			return nil
		},
	})
	return c
}
