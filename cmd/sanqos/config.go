package main

import (
	"fmt"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/internal/cli"
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

// hostDevices lists the block devices config check compares the config's
// devices with; tests point it at a fixture.
var hostDevices = config.Diskstats("/proc")

func configCheckCmd() *cobra.Command {
	var allowNone, strict bool
	c := &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a config file as a whole without applying it",
		Long: `Parses and validates FILE as the agent would at start or on SIGHUP, and
prints a one-line summary. Exits 3 with every problem if it is invalid, one
line each, FILE:LINE: key: value: what it should be, in line order: an
unknown key names the nearest one, a value the kind or range it should be,
a YAML syntax error the line it is on. Run it before 'systemctl reload
sanqos'.

Warnings leave the file valid and exit 0; --strict makes them exit 3. They
are: an address listed twice in a resource's important or throttleable, or
in both (important wins), a device listed twice, and a device (devices:,
consumer_devices:) that is not in this host's /proc/diskstats (a mistyped
name, or a LUN not created yet: the agent would measure no read wait on it).

A file without resources (an empty one included) is refused too, although
the agent would start with it: it would protect nothing, which is most
likely a wrong or truncated file. A cluster member whose resources come
from the cluster policy passes --allow-no-resources.`,
		Example: `  sanqos config check /etc/sanqos/sanqos.yaml
  sanqos config check --strict /etc/sanqos/sanqos.yaml && systemctl reload sanqos
  sanqos config check --allow-no-resources /etc/sanqos/member.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(args[0])
			if err != nil {
				return err
			}
			if err := cfg.NoResources(); err != nil && !allowNone {
				return cli.ConfigError{Err: fmt.Errorf("%s: %w", args[0], err)}
			}
			if err := cfg.CheckDevices(hostDevices); err != nil {
				cfg.Warnings = append(cfg.Warnings, fmt.Sprintf("%s: devices not checked against /proc/diskstats: %v", args[0], err))
			}
			warnings := len(cfg.Warnings)
			if allowNone && cfg.NoResources() != nil {
				warnings-- // asked for: not one --strict refuses
			}
			out := cmd.OutOrStdout()
			if !strict || warnings == 0 {
				thr := cfg.Threshold.String()
				if cfg.ThresholdAuto {
					thr = "auto"
				}
				fmt.Fprintf(out, "%s: ok (%d resources, backend %s, threshold %s, interval %v)\n",
					args[0], len(cfg.Resources), cfg.Backend, thr, cfg.Interval)
			}
			for _, w := range cfg.Warnings {
				fmt.Fprintf(out, "warning: %s\n", w)
			}
			if strict && warnings > 0 {
				return cli.ConfigError{Err: fmt.Errorf("%s: refused: %d warnings and --strict", args[0], warnings)}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&allowNone, "allow-no-resources", false, "accept a file without resources (a cluster member's, whose resources come from the cluster policy)")
	c.Flags().BoolVar(&strict, "strict", false, "exit 3 when there are warnings, as for errors")
	return c
}
