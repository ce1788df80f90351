package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/sanqos/sanqos/agent"
)

// printEvents prints the agent's event history (sanqos status --events):
// a table, oldest first, or with asJSON the events as the API sends them.
func printEvents(w io.Writer, socket string, asJSON bool) error {
	evs, err := agent.NewClient(socket).Events(0)
	if errors.Is(err, agent.ErrNotRunning) {
		return fmt.Errorf("agent not running: no answer on %s (%s)", socket, agent.StartHint)
	}
	if err != nil {
		return err
	}
	if asJSON {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(evs)
	}
	renderEvents(w, evs)
	return nil
}

// renderEvents is the events table: when, where, who, what changed, its
// delays, the wait against the threshold, its share of the load, why.
func renderEvents(w io.Writer, evs []agent.Event) {
	if len(evs) == 0 {
		fmt.Fprintln(w, "no events: the agent has slowed nobody since it started (or it runs without --config)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tRESOURCE\tCONSUMER\tEVENT\tDELAYS\tREAD WAIT\tSHARE\tREASON")
	for _, e := range evs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.0f%%\t%s\n", e.Time.Local().Format("01-02 15:04:05.0"), e.Resource, e.Consumer,
			e.Kind, e.Delays(), e.Indicator(), 100*e.Share, e.Reason)
	}
	tw.Flush()
	if n := len(evs); n >= agent.EventHistory {
		fmt.Fprintf(w, "(the last %d events; older ones are in the agent's log)\n", n)
	}
}
