package main

import (
	"fmt"
	"strings"

	"github.com/sanqos/sanqos/throttle"
	"github.com/spf13/cobra"
)

func cleanupCmd() *cobra.Command {
	label := "sanqos"
	c := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove the rules, sets and qdiscs a crashed agent left behind",
		Long: `Removes every kernel object an agent with this label created, in the current
network namespace: the delay line's iptables rules and ipsets, and the netem
and HTB backends' qdiscs, mangle chains and ipsets, the write caps' IFB and
ingress filter, and the EDT backend's fq root and egress filter. Objects are found by
label (rule comments, set names, qdisc handles), never by guessing, so other
software's rules are left alone.

An agent does the same for its own label when it starts, so this is only
needed when an agent crashed and will not be restarted. Do not run it
against a live agent's label: its throttles would vanish under it. A left
delay-line rule is harmless meanwhile (--queue-bypass lets traffic through
when no agent reads the queue); a left netem mark is not, until its ipset
entries time out, nor a left write cap, until its heartbeat lapses
(one second). Needs root.`,
		Example: `  sanqos cleanup
  ip netns exec bm sanqos cleanup --label sanqos-lab-agent`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The agent derives one label per backend from its own; the
			// registry knows every backend's.
			if err := throttle.Cleanup(label); err != nil {
				return fmt.Errorf("cleanup of %q: %w", label, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed every object labelled %s{%s}\n", label, strings.Join(throttle.Suffixes(), ","))
			return nil
		},
	}
	c.Flags().StringVar(&label, "label", label, "the agent's --label")
	return c
}
