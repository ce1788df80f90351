package labcli

import (
	"fmt"
	"os"
	"time"

	"github.com/sanqos/sanqos/sim"
	"github.com/spf13/cobra"
)

func tuneCmd() *cobra.Command {
	to := sim.DefaultTune()
	var params, results, outYAML string
	var minKept float64
	c := &cobra.Command{
		Use:   "tune",
		Short: "Find PID gains for a resource by a search over the (calibrated) simulator",
		Long: `Searches Kp × Ti on the simulator — the real agent and PID against the
calibrated model, running the pid experiment's workload (a reader and 12
writers switched on and off six times) — and ranks the gains by p95
overshoot above the threshold, settling time after each writer step and
time above 1.2 × threshold, among those keeping at least --min-kept of the
writers' unregulated throughput. Prints the best gains' figures and the
config snippet to run the agent with them. Method: ` + sim.TuneMethod + `.`,
		Example: `  sanqos-lab sim calibrate results
  sanqos-lab tune --params results/sim-calibration/latest/params.json --threshold 15ms --out-yaml tuned.yaml
  sanqos-lab sim pid --params results/sim-calibration/latest/params.json --agent-yaml tuned.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if params != "" {
				p, err := sim.LoadParams(params)
				if err != nil {
					return err
				}
				to.Params = p
			}
			to.MinKept = minKept / 100
			t0 := time.Now()
			r, err := sim.Tune(to)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%d candidates in %.1f s; threshold %.0f ms, baseline writes %.2f MB/s\n", len(r.Ranked), time.Since(t0).Seconds(), r.Threshold, r.BaselineMB)
			fmt.Fprintln(w, "   kp      ti   overshoot  settle  >1.2×   kept   score")
			for i, c := range r.Ranked {
				if i == 8 {
					break
				}
				fmt.Fprintf(w, "%5.2f %7v %+9.1f%% %6.2fs %5.1f%% %5.1f%% %7.2f\n", c.Kp, c.Ti, c.OvershootPct, c.SettleS, c.AbovePct, c.KeptPct, c.Score)
			}
			b := r.Best
			fmt.Fprintf(w, "\nbest: Kp %v, Ti %v: p95 overshoot %+.1f%%, settling %.2f s, writes kept %.1f%%\n# add to the agent's config:\n%s",
				b.Kp, b.Ti, b.OvershootPct, b.SettleS, b.KeptPct, b.YAML(to.Alpha))
			if outYAML != "" {
				if err := os.WriteFile(outYAML, []byte(b.YAML(to.Alpha)), 0o644); err != nil {
					return err
				}
			}
			if results != "" {
				dir, err := saveSummary(results, "tune", r)
				if err != nil {
					return err
				}
				fmt.Fprintln(w, "#", dir)
			}
			return nil
		},
	}
	c.Flags().DurationVar(&to.Threshold, "threshold", to.Threshold, "the resource's read-wait threshold")
	c.Flags().StringVar(&params, "params", "", "`FILE` of model parameters (params.json from sim calibrate)")
	c.Flags().Float64Var(&to.Alpha, "ewma-alpha", to.Alpha, "indicator EWMA α the agent will run with")
	c.Flags().Float64Var(&to.Scale, "scale", to.Scale, "workload durations = thesis' × scale")
	c.Flags().Uint64Var(&to.Seed, "seed", to.Seed, "random seed")
	c.Flags().Float64Var(&minKept, "min-kept", 100*to.MinKept, "least share (%) of the baseline's write throughput to keep")
	c.Flags().StringVar(&results, "results", "", "also write RESULTS/tune/RUN-ID/summary.json")
	c.Flags().StringVar(&outYAML, "out-yaml", "", "also write the config snippet to `FILE` (for the agent's config or sim --agent-yaml)")
	return c
}
