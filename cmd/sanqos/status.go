package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/dashboard"
	"github.com/sanqos/sanqos/throttle"
	"github.com/spf13/cobra"
)

func statusCmd() *cobra.Command {
	var socketOf func() (string, error)
	var asJSON, events bool
	var watch time.Duration
	var count int
	c := &cobra.Command{
		Use:   "status",
		Short: "Show each resource's wait vs threshold and who is being slowed",
		Long: `Asks the running agent (over its control socket) for its state and prints
the terminal version of the dashboard:

  resources  the read-wait indicator (EWMA) against the threshold, ABOVE when
             it is over, the floor (the read wait with no interferer, "-"
             until the agent has seen the resource quiet), the delay the
             controller applies (and its step), and the throttleable set;
  consumers  every consumer a resource has seen or the backend throttles:
             write/read rates, applied write/read delays (by the controller
             or by 'sanqos throttle set'), rate caps.

--events prints instead the agent's last 256 events: each time it started
or stopped slowing a consumer, changed its direction, held it while idle,
pinned it at max_delay or spared it as important, with the read wait
against the threshold, the consumer's share of the load, its delays and
the reason.

A wait shows as "-" when the resource's devices had no reads (no wait
measured is not 0 ms). --json prints the agent's status document for
scripts (wait fields are null when unmeasured). --watch refreshes like top;
--watch alone every 2s, or --watch=500ms.

The agent's socket is the one the config at --config sets (socket:; by
default /etc/sanqos/sanqos.yaml, the unit's), unless --socket names it.

Needs root: the agent's control socket is root-only.`,
		Example: `  sanqos status
  sanqos status --watch
  sanqos status --watch=500ms --count 10
  sanqos status --events
  sanqos status --events --json | jq '.[] | select(.kind == "slow") | {consumer, reason}'
  sanqos status --json | jq '.resources[] | {name, indicator_ms, threshold_ms}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			socket, err := socketOf()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if events {
				return printEvents(out, socket, asJSON)
			}
			fetch := func() (agent.Status, error) { return fetchStatus(socket) }
			if watch <= 0 {
				st, err := fetch()
				if err != nil {
					return err
				}
				return printStatusDoc(out, st, asJSON)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return watchStatus(ctx, out, watch, count, func(w io.Writer) error {
				st, err := fetch()
				if err != nil {
					// Keep watching: the agent may be restarting.
					fmt.Fprintf(w, "%s  %v\n", time.Now().Format(time.TimeOnly), err)
					return nil
				}
				return printStatusDoc(w, st, asJSON)
			}, !asJSON)
		},
	}
	f := c.Flags()
	socketOf = agentSocketFlags(f)
	f.BoolVar(&asJSON, "json", false, "print the status document (or with --events the events) as JSON")
	f.BoolVar(&events, "events", false, "print the agent's event history: whom it slowed or released, when and why")
	f.DurationVar(&watch, "watch", 0, "refresh every interval until interrupted (--watch alone: 2s)")
	f.Lookup("watch").NoOptDefVal = "2s"
	f.IntVar(&count, "count", 0, "with --watch, stop after this many refreshes (0: never)")
	return c
}

// fetchStatus gets the agent's status, saying plainly when there is no
// agent (the most common first-time mistake).
func fetchStatus(socket string) (agent.Status, error) {
	var st agent.Status
	err := agent.NewClient(socket).Status(&st)
	if errors.Is(err, agent.ErrNotRunning) {
		why := "no socket at " + socket
		if _, serr := os.Stat(socket); serr == nil {
			why = "nothing listens on " + socket + " (stale socket)"
		}
		return st, fmt.Errorf("agent not running: %s (%s)", why, agent.StartHint)
	}
	if err == nil && st.Throttles == nil {
		// An agent without --config reports only its backend; its manual
		// throttles come from the list.
		m, lerr := agent.NewClient(socket).List()
		if lerr != nil {
			return st, lerr
		}
		st.Throttles = map[string]throttle.Setting{}
		for a, s := range m {
			st.Throttles[a.String()] = s
		}
	}
	return st, err
}

// watchStatus calls render every interval, clearing the terminal first
// when clear is set (not for --json, whose output is a stream of
// documents), until ctx ends or count refreshes were printed.
func watchStatus(ctx context.Context, out io.Writer, every time.Duration, count int, render func(io.Writer) error, clear bool) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 1; ; n++ {
		var b strings.Builder
		if clear {
			b.WriteString("\033[H\033[2J") // home, clear screen: one write per frame, no flicker
		}
		if err := render(&b); err != nil {
			return err
		}
		if _, err := io.WriteString(out, b.String()); err != nil {
			return err
		}
		if count > 0 && n >= count {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func printStatusDoc(w io.Writer, st agent.Status, asJSON bool) error {
	if asJSON {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(st)
	}
	renderStatus(w, st)
	return nil
}

// renderStatus prints the two tables. It uses the dashboard's frame, so
// the terminal and the browser show the same numbers.
func renderStatus(w io.Writer, st agent.Status) {
	f := dashboard.FrameOf(st)
	fmt.Fprintf(w, "sanqos agent  backend %s  at %s\n", orDash(st.Backend), st.Time.Local().Format("2006-01-02 15:04:05"))
	if len(st.Sources) > 0 {
		fmt.Fprintf(w, "discovery: %s\n", strings.Join(st.Sources, ", "))
	}
	if st.Discovery != "" {
		fmt.Fprintf(w, "discovery failing (last good topology kept): %s\n", st.Discovery)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	atMax := false
	if len(f.Resources) == 0 {
		fmt.Fprintln(tw, "no resources (agent without --config: manual throttles only)")
	} else {
		fmt.Fprintln(tw, "RESOURCE\tWAIT (EWMA)\tTHRESHOLD\tFLOOR\tSTATE\tDELAY\tSTEP\tTHROTTLEABLE")
		for i, r := range f.Resources {
			state := "ok"
			switch {
			case st.Resources[i].Unmapped != "":
				state = "UNMAPPED" // discovery found nothing for it: it protects nothing
			case r.Unreachable:
				state = "UNREACHABLE" // the threshold is at the wait reads have with no writer
			case r.RateLeverStep > 0:
				state = "capping" // past the maximum delay: writers' rates capped
			case r.AtMaxDelay:
				state, atMax = "AT MAX", true
			case float64(r.IndicatorMs) > float64(r.ThresholdMs):
				state = "ABOVE"
			case r.DelayMs > 0:
				state = "holding"
			}
			set := "-"
			if rs := st.Resources[i].Throttleable; len(rs) > 0 {
				set = strings.Join(rs, ",")
			}
			thr := waitMs(float64(r.ThresholdMs))
			if a := st.Resources[i].Auto; a != nil {
				thr += " auto" // threshold: auto, learned
				if a.State != "learned" {
					thr += " (learning)"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Name, waitMs(float64(r.IndicatorMs)), thr,
				msOrDash(r.FloorMs), state, msOrDash(r.DelayMs), r.Step, set)
		}
	}
	tw.Flush()
	for _, r := range st.Resources {
		if r.Unmapped != "" {
			fmt.Fprintf(w, "UNMAPPED %s: %s (it measures and slows nothing; discovery retries it every round)\n", r.Name, r.Unmapped)
		}
	}
	for _, p := range st.UnthrottledPorts {
		fmt.Fprintf(w, "UNTHROTTLED PORT %d: the target exports on it, but it is not among the agent's ports: its hosts count as consumers, their traffic is neither delayed nor measured\n", p)
	}
	if atMax {
		fmt.Fprintln(w, "AT MAX: the wait is above the threshold at max_delay. Raise max_delay (up to 99 ms: about the interferers'")
		fmt.Fprintln(w, "streams × a request's service time), name consumers throttleable or important, or cap the writers past it:")
		fmt.Fprintln(w, "rate_lever_steps with backend edt+htb (or delayline+htb).")
	}
	renderClasses(w, st)
	renderReservations(w, st)
	fmt.Fprintln(w)
	if len(f.Consumers) == 0 {
		fmt.Fprintln(w, "no consumers seen or throttled")
		return
	}
	fmt.Fprintln(tw, "CONSUMER\tRESOURCES\tWRITE MB/s\tREAD MB/s\tWRITE DELAY\tREAD DELAY\tRATE CAP\tQUEUE\tLOAD R/W\tSTATE")
	for _, c := range f.Consumers {
		state := ""
		switch {
		case c.Important:
			state = "important"
		case c.Held:
			state = "held" // its last delays, kept for its next burst
		case c.WriteDelayMs > 0 || c.ReadDelayMs > 0 || c.RateCapMBs > 0 || c.WriteCapMBs > 0:
			state = "slowed"
		case c.Throttleable:
			state = "throttleable"
		}
		var caps []string
		if c.RateCapMBs > 0 {
			caps = append(caps, fmt.Sprintf("%.2f MB/s", c.RateCapMBs))
		}
		if c.WriteCapMBs > 0 {
			caps = append(caps, fmt.Sprintf("write %.2f MB/s", c.WriteCapMBs))
		}
		rate := "-"
		if len(caps) > 0 {
			rate = strings.Join(caps, ", ")
		}
		res := strings.Join(c.Resources, ",")
		load := "-"
		if c.LoadRead+c.LoadWrite >= 0.005 {
			load = fmt.Sprintf("%.0f%%/%.0f%%", 100*c.LoadRead, 100*c.LoadWrite)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\n", c.Addr, orDash(res), mbs(float64(c.WriteMBs)), mbs(float64(c.ReadMBs)),
			msOrDash(c.WriteDelayMs), msOrDash(c.ReadDelayMs), rate, c.Queue, load, orDash(state))
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// measured formats v, or prints "-" for an unmeasured (NaN) figure.
func measured(format string, v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// msOrDash prints a delay; none (0) prints "-".
func msOrDash(v float64) string {
	if v == 0 {
		return "-"
	}
	return measured("%.1f ms", v)
}

func waitMs(v float64) string   { return measured("%.1f ms", v) }
func mbs(v float64) string      { return measured("%.2f", v) }
func pct(v float64) string      { return measured("%+.1f %%", v) }
func signedMs(v float64) string { return measured("%+.2f ms", v) }

// renderClasses prints the slo-classes resources' classes: the last
// tick, and over the class's life seed 004's throughput deviation (eq. 1),
// latency deviation (eq. 2) and jitter.
func renderClasses(w io.Writer, st agent.Status) {
	if !slices.ContainsFunc(st.Resources, func(r agent.ResourceStatus) bool { return len(r.Classes) > 0 }) {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tCLASS\tIOPS\tMB/s\tWAIT\tSTATE\tDELAY\tCREDIT\tTHROUGHPUT DEV\tIOPS DEV\tLATENCY DEV\tJITTER")
	for _, r := range st.Resources {
		for _, c := range r.Classes {
			state := "ok"
			switch {
			case c.Missing:
				state = "MISSING"
			case c.Exceeding:
				state = "exceeding"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f s\t%s\t%s\t%s\t%s\n", r.Name, c.Name, mbs(float64(c.IOPS)), mbs(float64(c.MBs)),
				waitMs(float64(c.LatencyMs)), state, msOrDash(c.DelayMs), c.CreditS, pct(float64(c.ThroughputDeviationPct)),
				pct(float64(c.IOPSDeviationPct)), signedMs(float64(c.LatencyDeviationMs)), waitMs(float64(c.JitterMs)))
		}
	}
	tw.Flush()
}

// renderReservations prints the reservations resources' network indicator
// and each reservation's current period, laxity and periods met.
func renderReservations(w io.Writer, st agent.Status) {
	if !slices.ContainsFunc(st.Resources, func(r agent.ResourceStatus) bool { return r.Network != nil }) {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tNET QUEUE\t(RAW)\tNET\tDISK\tAT RISK\tRELIEF STEPS")
	for _, r := range st.Resources {
		if n := r.Network; n != nil {
			net, disk := "ok", "ok"
			if n.Congested {
				net = "CONGESTED"
			}
			if n.DiskSaturated {
				disk = "SATURATED"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", r.Name, waitMs(float64(n.QueueMs)), waitMs(float64(n.RawQueueMs)), net, disk, n.AtRisk, n.Level)
		}
	}
	tw.Flush()
	fmt.Fprintln(tw, "RESOURCE\tRESERVED\tCONSUMER\tPERIOD\tATTAINED\tLAXITY\tPERIODS MET")
	for _, r := range st.Resources {
		for _, v := range r.Reservations {
			lax := measured("%.0f %%", 100*float64(v.LaxityPct))
			if v.AtRisk {
				lax += " AT RISK"
			}
			fmt.Fprintf(tw, "%s\t%.4g %s\t%s\t%.3g s\t%.4g\t%s\t%d/%d\n", r.Name, v.Reserved, v.Unit, v.Consumer, v.PeriodS, v.Attained, lax, v.PeriodsMet, v.Periods)
		}
	}
	tw.Flush()
}
