package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sanqos/sanqos/doctor"
	"github.com/sanqos/sanqos/internal/cli"
	"github.com/spf13/cobra"
)

func doctorCmd() *cobra.Command {
	var cfgPath string
	var asJSON, strict bool
	var window time.Duration
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Preflight: could the agent run here, and if not, why (changes nothing)",
		Long: `Checks, without changing anything (no namespaces, qdiscs, rules, sets or
queue bindings), whether 'sanqos agent' could run on this host with the given
config, and prints one line per check, then each check's details:

  config        the config loads and validates as the agent would load it,
                and its devices are in /proc/diskstats
  kernel        netem, fq, clsact/BPF, HTB, NFQUEUE, ipset/xt_set, nf_tables...
                from /proc/config.gz or /boot/config-RELEASE and modules.dep
  capabilities  what this process holds against what the agent needs
  netfilter     iptables (legacy or nft), nft, sanqos rules and sets present
  nfqueue       whether the delay line's queue 0 is taken in this namespace
  interfaces    the interface it would throttle on (device:, or the only one up)
  backend       which backend auto would pick and why, and whether it builds
  listeners     the control socket and HTTP address are free
  target        tgt, LIO (configfs) and IET found
  discovery     the resources, LUNs and consumers discovery would find, and
                the config's resources mapped onto them
  threshold     with --window: each resource's floor (its read wait when
                quiet) and its read wait at its busiest, measured from
                /proc/diskstats over the window, and a suggested threshold

Exits 0 when the agent could run (warnings included), 1 when a check failed.
With --strict the config's warnings fail its check (an address listed
twice, or both important and throttleable; a device listed twice or not
in /proc/diskstats); the other checks' warnings stay warnings.
It checks its own capabilities; to check with the systemd unit's, run it
under them (last example). Every check and what to do when it fails:
docs/doctor.md.`,
		Example: `  sanqos doctor --config /etc/sanqos/sanqos.yaml
  sanqos doctor                       # as 'sanqos agent' without a config
  sanqos doctor --config /etc/sanqos/sanqos.yaml --json | jq '.checks[] | select(.status != "ok")'
  sanqos doctor --config /etc/sanqos/sanqos.yaml && systemctl start sanqos
  sanqos doctor --config /etc/sanqos/sanqos.yaml --window 60s   # during the backup: suggests a threshold
  setpriv --bounding-set -all,+net_admin,+net_raw sanqos doctor --config /etc/sanqos/sanqos.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env := doctor.NewEnv(doctor.System(), cfgPath)
			if window > 0 && cfgPath == "" {
				return cli.UsageError{Err: errors.New("--window measures the config's resources: give --config")}
			}
			env.Window = window
			env.Strict = strict
			rep := doctor.Run(env, doctor.Checks(env))
			out := cmd.OutOrStdout()
			if asJSON {
				e := json.NewEncoder(out)
				e.SetIndent("", "  ")
				if err := e.Encode(rep); err != nil {
					return err
				}
			} else if err := printDoctor(out, rep); err != nil {
				return err
			}
			if !rep.OK {
				return fmt.Errorf("doctor: the agent could not run (failed: %s)", strings.Join(rep.Failed(), ", "))
			}
			return nil
		},
	}
	c.Flags().StringVar(&cfgPath, "config", "", "the agent's YAML config (default: check as 'sanqos agent' without one)")
	c.Flags().DurationVar(&window, "window", 0, "with --config: measure each resource's floor and its read wait at its busiest from /proc/diskstats over this long (e.g. 60s, while the interferers run) and suggest a threshold")
	c.Flags().BoolVar(&strict, "strict", false, "fail the config check on its warnings (exit 1), as on its errors")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON: {config, ok, checks[{name, status, summary, detail}]}")
	return c
}

// printDoctor prints the summary table, then the details of each check.
func printDoctor(w io.Writer, rep doctor.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tSUMMARY")
	for _, r := range rep.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, r.Status, r.Summary)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rep.Results {
		if len(r.Detail) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s (%s):\n", r.Name, r.Status)
		for _, d := range r.Detail {
			fmt.Fprintf(w, "  %s\n", d)
		}
	}
	verdict := "the agent could run"
	if warns := countStatus(rep, doctor.Warn); warns > 0 {
		verdict += fmt.Sprintf(" (%d warnings)", warns)
	}
	if !rep.OK {
		verdict = "the agent could NOT run: " + strings.Join(rep.Failed(), ", ") + " failed"
	}
	_, err := fmt.Fprintf(w, "\n%s\n", verdict)
	return err
}

func countStatus(rep doctor.Report, s doctor.Status) int {
	n := 0
	for _, r := range rep.Results {
		if r.Status == s {
			n++
		}
	}
	return n
}
