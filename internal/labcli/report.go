package labcli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sanqos/sanqos/report"
	"github.com/spf13/cobra"
)

func reportCmd() *cobra.Command {
	var quiet bool
	c := &cobra.Command{
		Use:   "report RESULTS_DIR...",
		Short: "Regenerate a run's plots and one-page HTML report, and print its figures",
		Long: `Reads a results directory written by 'sanqos-lab lab run' or 'sanqos-lab sim'
(the same summary.json formats): summary.json, and trace.csv when present.
It redraws the plots (files named report-*.png: the experiment's key result
from the summary, and read wait and write rate per phase from the trace,
with the thresholds) and writes report.html: run metadata, the summary as
tables (scalars, then one table per list), and every figure of the
directory embedded, so the single file can be mailed or attached to an
issue. Any summary.json renders; known experiments (pid, autonomic,
interference, delay-sweep, equal-share) get their specific plot. The lab
calls this at the end of every run.

It then prints the run's headline figures, so a lab run and its simulation
can be compared side by side in a terminal.

A directory holding a 'latest' link (results/NAME) means its latest run.`,
		Example: `  sanqos-lab report results/autonomic/latest
  sanqos-lab report results/autonomic          # same: follows latest
  sanqos-lab report results/autonomic results/sim-autonomic
  sanqos-lab report results/*/latest           # every experiment's last run
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
				if !quiet {
					if err := printFigures(cmd, dir); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "only write the report; print its path")
	return c
}

// printFigures prints the headline figures of a run's summary.json.
func printFigures(cmd *cobra.Command, dir string) error {
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
	case "pid", "autonomic", "read-backup", "mixed":
		var s report.ControlledSummary
		err, sum = json.Unmarshal(b, &s), s
	default:
		_, err := cmd.OutOrStdout().Write(b)
		return err
	}
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	printSummary(cmd, sum)
	if s, ok := sum.(report.ControlledSummary); ok {
		if line := beforeAfter(dir, s); line != "" {
			fmt.Fprintln(cmd.OutOrStdout(), line)
		}
	}
	return nil
}

// beforeAfter is a controlled run's last word: the reader's p95 with the
// agent off and on at the first threshold, what the interferers kept,
// and the picture, when the run drew it ("" otherwise).
func beforeAfter(dir string, s report.ControlledSummary) string {
	plot := filepath.Join(dir, report.BeforeAfterPlot)
	if _, err := os.Stat(plot); err != nil || len(s.Regulated) == 0 {
		return ""
	}
	if abs, err := filepath.Abs(plot); err == nil {
		plot = abs
	}
	on := s.Regulated[0]
	// Writers (pid, autonomic: no interferers named) move writes; the
	// other loads move reads and writes.
	moved := func(r report.ControlledRun) float64 { return r.ReadMBs + r.WriteMBs }
	who, whose := "the "+s.Interferers, "their"
	switch s.Interferers {
	case "":
		moved = func(r report.ControlledRun) float64 { return r.WriteMBs }
		who = "the writers"
	case "readers":
		who, whose = "the backup", "its"
	}
	kept := ""
	if b := moved(s.Baseline); b > 0 {
		kept = fmt.Sprintf(", %s kept %.0f%% of %s throughput", who, 100*moved(on)/b, whose)
	}
	return fmt.Sprintf("before/after: the reader's read wait p95 %.2f ms with the agent off, %.2f ms with it on at %.0f ms%s, same load, same run: %s",
		s.Baseline.ReadWaitMs.P95, on.ReadWaitMs.P95, on.ThresholdMs, kept, plot)
}
