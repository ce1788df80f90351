package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/internal/cli"
	"github.com/sanqos/sanqos/throttle"
	"github.com/spf13/cobra"
)

func throttleCmd() *cobra.Command {
	socket := agent.DefaultSocket
	c := &cobra.Command{
		Use:   "throttle",
		Short: "Set, clear and list per-consumer throttles on the running agent",
		Long: `Manual throttles, applied by the running agent's backend (delay line, netem
or HTB). A read delay is added to segments carrying data to the consumer. A
write delay is added, by default, to the target's replies to it (R2Ts and
SCSI status: each write command completes that much later, while its data
is acknowledged on time, so its TCP sends no spurious loss probes); with the
agent's --write-delay-on acks (the thesis' method) to the pure ACKs sent to
it instead (its writes then open their TCP window later). A rate caps
bytes/s sent to it. Delays must be below 100 ms, far from TCP's 200 ms
minimum retransmission timeout.

Throttles set here are shown by 'sanqos status' and the dashboard. Talks to
the agent over its root-only unix socket, so it needs root.`,
		Example: `  sanqos throttle set 10.99.0.3 --write-delay 2ms
  sanqos throttle list
  sanqos throttle clear --all`,
	}
	socketOf := agentSocketFlags(c.PersistentFlags())
	c.PersistentPreRunE = func(*cobra.Command, []string) (err error) {
		socket, err = socketOf()
		return err
	}
	c.AddCommand(throttleSetCmd(&socket), throttleClearCmd(&socket), throttleListCmd(&socket), throttleBackendsCmd())
	return c
}

// throttleSetCmd is 'throttle set', talking to the agent at *socket.
func throttleSetCmd(socket *string) *cobra.Command {
	var readDelay, writeDelay, rate, writeRate string
	set := &cobra.Command{
		Use:   "set CONSUMER...",
		Short: "Throttle consumers (IPv4/IPv6 addresses)",
		Long: `Applies one setting to every named consumer, all or nothing (a bad address
or delay changes nothing), and prints each consumer's setting now, one line
each. A consumer the backend cannot throttle (IPv6 on netem, htb or the
write caps) is named in the error, and the others are applied. Setting a consumer again replaces its whole setting. A controller
running for the consumer's resource may later change a write delay it set
itself.`,
		Example: `  sanqos throttle set 10.99.0.3 --write-delay 2ms
  sanqos throttle set 10.99.0.2 --read-delay 4.6ms --write-delay 2ms
  sanqos throttle set 10.99.0.4 10.99.0.5 --rate 10MiB/s
  sanqos throttle set 10.99.0.3 --write-rate 2MiB/s     # backend delayline+htb`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := parseSetting(readDelay, writeDelay, rate, writeRate)
			if err != nil {
				return err
			}
			addrs, err := parseAddrs(args)
			if err != nil {
				return err
			}
			m := map[netip.Addr]throttle.Setting{}
			for _, a := range addrs {
				m[a] = s
			}
			if err := agent.NewClient(*socket).Set(m); err != nil {
				return err
			}
			return printApplied(cmd.OutOrStdout(), addrs, s)
		},
	}
	set.Flags().StringVar(&readDelay, "read-delay", "", "delay of data segments to the consumer, e.g. 4.6ms")
	set.Flags().StringVar(&writeDelay, "write-delay", "", "delay of the target's replies (or, with the agent's --write-delay-on acks, its pure ACKs) to the consumer, e.g. 2ms")
	set.Flags().StringVar(&rate, "rate", "", "rate cap towards the consumer, e.g. 10MiB/s or 80Mbit/s")
	set.Flags().StringVar(&writeRate, "write-rate", "", "cap on the consumer's writes (what reaches the target from it), e.g. 2MiB/s; backend delayline+htb")
	return set
}

// throttleClearCmd is 'throttle clear'.
func throttleClearCmd(socket *string) *cobra.Command {
	var all bool
	clr := &cobra.Command{
		Use:     "clear CONSUMER...|--all",
		Short:   "Remove consumers' throttles",
		Long:    "Removes the named consumers' throttles (their packets pass undelayed at once), or every consumer's with --all, and says so.",
		Example: "  sanqos throttle clear 10.99.0.3\n  sanqos throttle clear --all",
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) > 0) {
				return cli.Usagef("name consumers or give --all (not both)")
			}
			addrs, err := parseAddrs(args)
			if err != nil {
				return err
			}
			if err := agent.NewClient(*socket).Clear(addrs...); err != nil {
				return err
			}
			if all {
				_, err = fmt.Fprintln(cmd.OutOrStdout(), "cleared every consumer's throttle")
				return err
			}
			for _, a := range addrs {
				if _, err := fmt.Fprintf(cmd.OutOrStdout(), "%s: cleared\n", a); err != nil {
					return err
				}
			}
			return nil
		},
	}
	clr.Flags().BoolVar(&all, "all", false, "clear every consumer")
	return clr
}

// throttleListCmd is 'throttle list'.
func throttleListCmd(socket *string) *cobra.Command {
	list := &cobra.Command{
		Use:     "list",
		Short:   "List throttled consumers",
		Long:    "Lists every consumer the backend delays or caps now, set by hand or by a controller.",
		Example: "  sanqos throttle list",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := agent.NewClient(*socket).List()
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "CONSUMER\tREAD DELAY\tWRITE DELAY\tRATE\tWRITE RATE")
			for _, a := range slices.SortedFunc(maps.Keys(m), netip.Addr.Compare) {
				s := m[a]
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", a, fmtDelay(s.ReadDelay), fmtDelay(s.WriteDelay), fmtRate(s.Rate), fmtRate(s.WriteRate))
			}
			return w.Flush()
		},
	}
	return list
}

// throttleBackendsCmd is 'throttle backends'.
func throttleBackendsCmd() *cobra.Command {
	var asJSON bool
	backends := &cobra.Command{
		Use:   "backends",
		Short: "List the throttle backends and whether this kernel runs them",
		Long: `Probes, in scratch network namespaces, which throttle backends this kernel
can run and says why the others cannot; needs root. 'auto' takes the first
available of ` + andList(throttle.DelayNames()) + `.`,
		Example: "  sanqos throttle backends\n  sanqos throttle backends --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bs := throttle.Backends()
			if asJSON {
				e := json.NewEncoder(cmd.OutOrStdout())
				e.SetIndent("", "  ")
				return e.Encode(bs)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "BACKEND\tAVAILABLE\tWHAT\tWHY")
			for _, b := range bs {
				avail := "no"
				if b.Available {
					avail = "yes"
				}
				if b.Auto {
					avail += " (auto)"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", b.Name, avail, b.About, b.Why)
			}
			return w.Flush()
		},
	}
	backends.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return backends
}

// parseSetting is throttle set's flags as one setting; a missing or
// malformed value is a usage error naming its flag.
func parseSetting(readDelay, writeDelay, rate, writeRate string) (throttle.Setting, error) {
	var s throttle.Setting
	if readDelay == "" && writeDelay == "" && rate == "" && writeRate == "" {
		return s, cli.Usagef("give --read-delay, --write-delay, --rate and/or --write-rate")
	}
	for _, f := range []struct {
		flag, v string
		d       *time.Duration
	}{{"read-delay", readDelay, &s.ReadDelay}, {"write-delay", writeDelay, &s.WriteDelay}} {
		if f.v == "" {
			continue
		}
		d, err := throttle.ParseDelay(f.v)
		if err != nil {
			return s, cli.Usagef("--%s: %w", f.flag, err)
		}
		*f.d = d
	}
	for _, f := range []struct {
		flag, v string
		r       *uint64
	}{{"rate", rate, &s.Rate}, {"write-rate", writeRate, &s.WriteRate}} {
		if f.v == "" {
			continue
		}
		r, err := throttle.ParseRate(f.v)
		if err != nil {
			return s, cli.Usagef("--%s: %w", f.flag, err)
		}
		*f.r = r
	}
	return s, nil
}

// printApplied says what throttle set applied: one line per consumer,
// with its whole setting, since it replaced whatever was there.
func printApplied(w io.Writer, addrs []netip.Addr, s throttle.Setting) error {
	none := func(v string) string {
		if v == "-" {
			return "none"
		}
		return v
	}
	for _, a := range addrs {
		if _, err := fmt.Fprintf(w, "%s: read delay %s, write delay %s, rate cap %s, write rate cap %s\n", a,
			none(fmtDelay(s.ReadDelay)), none(fmtDelay(s.WriteDelay)), none(fmtRate(s.Rate)), none(fmtRate(s.WriteRate))); err != nil {
			return err
		}
	}
	return nil
}

func fmtDelay(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.String()
}

func parseAddrs(args []string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, s := range args {
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil:
			return nil, cli.Usagef("consumer %q is not an IPv4/IPv6 address", s)
		case a.Zone() != "":
			// A consumer is the address its packets carry, which has no zone.
			return nil, cli.Usagef("consumer %q: give the address without its zone (%%%s)", s, a.Zone())
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

func fmtRate(r uint64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f MB/s", float64(r)/1e6)
}

// andList is "a, b and c".
func andList(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}
