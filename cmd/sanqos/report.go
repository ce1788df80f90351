package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sanqos/sanqos/report"
	"github.com/spf13/cobra"
)

func reportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "report RESULTS_DIR...",
		Short: "Regenerate a run's plots and a one-page HTML report",
		Long: `Reads a results directory written by 'sanqos lab run' (or the simulator):
summary.json, and trace.csv when present. It redraws the plots (files named
report-*.png: the experiment's key result from the summary, and read wait
and write rate per phase from the trace, with the thresholds) and writes
report.html: run metadata, the summary as tables (scalars, then one table
per list), and every figure of the directory embedded, so the single file
can be mailed or attached to an issue. Any summary.json renders; known
experiments (pid, autonomic, interference, delay-sweep, equal-share) get
their specific plot. The lab calls this at the end of every run.

A directory holding a 'latest' link (results/NAME) means its latest run.`,
		Example: `  sanqos report results/autonomic/latest
  sanqos report results/autonomic          # same: follows latest
  sanqos report results/*/latest           # every experiment's last run
  xdg-open results/autonomic/latest/report.html`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, dir := range args {
				if _, err := os.Stat(filepath.Join(dir, "summary.json")); err != nil {
					if _, lerr := os.Stat(filepath.Join(dir, "latest", "summary.json")); lerr == nil {
						dir = filepath.Join(dir, "latest")
					}
				}
				out, err := report.Generate(dir)
				if err != nil {
					return fmt.Errorf("%s: %w", dir, err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), out)
			}
			return nil
		},
	}
}
