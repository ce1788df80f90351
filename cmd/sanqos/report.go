package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sanqos/sanqos/report"
	"github.com/spf13/cobra"
)

// reportCmd prints lab and simulator runs alike: both write the same
// summary.json shapes (package report).
func reportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "report RUN-DIR...",
		Short: "Print the figures of lab or simulator runs (interference, pid, autonomic)",
		Long: `Reads RUN-DIR/summary.json of lab runs (results/NAME/RUN-ID) and simulator
runs (results/sim-NAME/RUN-ID) — the same format — and prints their
figures one after another, e.g. a lab run beside its simulation.`,
		Example: `  sanqos report results/autonomic/latest results/sim-autonomic/latest`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, dir := range args {
				b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
				if err != nil {
					return err
				}
				var head struct {
					Experiment string `json:"experiment"`
				}
				if err := json.Unmarshal(b, &head); err != nil {
					return fmt.Errorf("%s: %w", dir, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "== %s (%s)\n", dir, head.Experiment)
				var sum any
				switch head.Experiment {
				case "interference":
					var s report.InterferenceSummary
					err, sum = json.Unmarshal(b, &s), s
				case "pid", "autonomic":
					var s report.ControlledSummary
					err, sum = json.Unmarshal(b, &s), s
				default:
					if _, err := cmd.OutOrStdout().Write(b); err != nil {
						return err
					}
					continue
				}
				if err != nil {
					return fmt.Errorf("%s: %w", dir, err)
				}
				printSummary(cmd, sum)
			}
			return nil
		},
	}
}
