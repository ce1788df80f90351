package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/sanqos/sanqos/advise"
	"github.com/sanqos/sanqos/internal/cli"
	"github.com/spf13/cobra"
	"github.com/vishvananda/netlink"
)

func adviseCmd() *cobra.Command {
	var (
		port      uint16
		interval  time.Duration
		asJSON    bool
		o         advise.Options
		bwMbit    float64
		maxBufKiB uint64
		sysRoot   string
	)
	c := &cobra.Command{
		Use:   "advise",
		Short: "Recommend TCP buffer and Open-iSCSI window settings from the live connections' RTT and bandwidth",
		Long: `Reads TCP_INFO (sock_diag) of every established connection on the iSCSI
port twice, --interval apart: smoothed RTT and its variation, the kernel's
delivery rate and the bytes moved in between. Per initiator it computes the
bandwidth-delay product (BDP = bandwidth × RTT) and applies an
Open-iSCSI tuning table (Table 4.3 in the output): with RTT ≤ 40 ms or a
stable RTT, set the send buffer statically to S_max_benefit (the BDP);
with a long and variable RTT, leave it to TCP autotuning (window_size 0). It prints the iscsiadm
command for the initiator (node.conn[0].tcp.window_size), the sysctls that
keep the kernel from shrinking that window (net.core.wmem_max/rmem_max,
net.ipv4.tcp_wmem/tcp_rmem; never lowered below their current values) and
why. It only reads; it changes nothing. Run it on the target (or an
initiator) while the connections carry load: an idle connection's
bandwidth is what it used, so give --bandwidth-mbit for the link otherwise.`,
		Example: `  sanqos advise
  sanqos advise --interval 5s --iqn iqn.2026-11.lab:vg1 --json
  sanqos advise --iscsi-port 3261
  sanqos advise --bandwidth-mbit 1000 --max-buffer-kib 1024`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			conns, err := advise.Measure(netlink.SocketDiagTCPInfo, port, advise.SleepFor(interval))
			if err != nil {
				return err
			}
			links := advise.Summarise(conns)
			if len(links) == 0 {
				return fmt.Errorf("no established TCP connection on port %d lasted the %v interval", port, interval)
			}
			lim, err := advise.ReadLimits(sysRoot)
			if err != nil {
				return err
			}
			o.MaxBuffer = maxBufKiB << 10
			var recs []advise.Recommendation
			for _, l := range links {
				if bwMbit > 0 {
					l.Bandwidth, l.Measured = bwMbit*1e6/8, false
				}
				recs = append(recs, advise.Recommend(l, lim, o))
			}
			w := cmd.OutOrStdout()
			if asJSON {
				e := json.NewEncoder(w)
				e.SetIndent("", "  ")
				return e.Encode(recs)
			}
			printAdvice(w, recs)
			return nil
		},
	}
	c.Flags().Uint16Var(&port, "iscsi-port", 3260, "the target's iSCSI TCP port, whose connections are measured")
	c.Flags().DurationVar(&interval, "interval", 2*time.Second, "measurement interval between the two TCP_INFO reads")
	c.Flags().BoolVar(&asJSON, "json", false, "print the recommendations as JSON")
	c.Flags().StringVar(&o.Target, "iqn", "", "the target's IQN, for the iscsiadm command (default: a placeholder)")
	c.Flags().Float64Var(&bwMbit, "bandwidth-mbit", 0, "link bandwidth in Mbit/s instead of the measured one")
	c.Flags().Uint64Var(&maxBufKiB, "max-buffer-kib", 0, "largest send buffer the initiator can afford (Table 4.3's restricted memory), KiB")
	c.Flags().StringVar(&sysRoot, "sysctl-root", "/proc/sys", "where to read the current sysctls")
	_ = c.Flags().MarkHidden("sysctl-root")
	cli.RenamedFlag(c.Flags(), "port", "iscsi-port")
	cli.RenamedFlag(c.Flags(), "target", "iqn") // 'lab --target' is tgt|lio
	return c
}

// printAdvice prints each initiator's recommendation for a terminal.
func printAdvice(w io.Writer, recs []advise.Recommendation) {
	for _, r := range recs {
		src := "measured"
		if !r.Measured {
			src = "given"
		}
		fmt.Fprintf(w, "initiator %s → portal %s (%d connection(s))\n", r.Peer, r.Portal, r.Conns)
		fmt.Fprintf(w, "  RTT %.3f ms ± %.3f ms (%s), bandwidth %.2f MB/s (%s), BDP %d B\n",
			r.RTTMs, r.RTTVarMs, map[bool]string{true: "variable", false: "stable"}[r.Variable], r.BandwidthBs/1e6, src, r.BDP)
		fmt.Fprintf(w, "  Table 4.3 row: %s\n", r.Row)
		fmt.Fprintf(w, "  on the initiator:\n    %s\n", r.Iscsiadm)
		fmt.Fprintln(w, "  sysctls:")
		for _, s := range r.Sysctls {
			cur := ""
			if s.Current != "" {
				cur = " (now " + s.Current + ")"
			}
			fmt.Fprintf(w, "    sysctl -w %s=%q%s\n      # %s\n", s.Key, s.Value, cur, s.Why)
		}
		fmt.Fprintln(w, "  why:")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "    - %s\n", n)
		}
	}
}
