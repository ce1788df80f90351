package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/sanqos/sanqos/capture"
	"github.com/sanqos/sanqos/internal/cli"
	"github.com/sanqos/sanqos/passive"
	"github.com/sanqos/sanqos/sample"
	"github.com/spf13/cobra"
)

// captureCmd is the capture command: its help text, its flag table and
// the capture loop as its RunE, one function as every command of this
// binary is (the flags' variables are the RunE's closure); the rows it
// prints are printCaptureRows'.
func captureCmd() *cobra.Command {
	var iface, pcap string
	var portals []string
	var port int
	var dur time.Duration
	c := &cobra.Command{
		Use:   "capture --interface IF --portal ADDR[:PORT]...",
		Short: "Show what bridge mode measures: passive SCSI latency per initiator, from the wire",
		Long: `Captures the iSCSI traffic on an interface (AF_PACKET, read-only: a copy of
each packet, nothing delayed or dropped) and prints, every second, per
initiator seen talking to the portals: SCSI READs and WRITEs completed,
their mean response time (command to response, matched by Initiator Task
Tag) and the MB/s each way; portals on port 4420 are NVMe/TCP, whose
NVMe reads and writes are timed by command id. This is exactly the signal
'sanqos agent' uses in mode bridge, so it shows whether a bridge port sees the sessions before
the agent is let loose on them. --pcap also writes the raw packets
(LINKTYPE_RAW, nanosecond pcap) for offline diagnosis or test fixtures.
Needs root (an AF_PACKET socket takes CAP_NET_RAW).`,
		Example: `  sanqos capture --interface eth1 --portal 192.168.10.5:3260
  ip netns exec sqlan sanqos capture --interface p-bm --portal 10.99.0.1 --duration 10s
  ip netns exec sqlan sanqos capture --interface p-bm --portal 10.99.0.1 --duration 2s --pcap /tmp/lab.pcap`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(portals) == 0 {
				return cli.Usagef("give at least one --portal")
			}
			var aps []netip.AddrPort
			for _, p := range portals {
				ap, err := passive.ParsePortal(p, uint16(port))
				if err != nil {
					return err
				}
				aps = append(aps, ap)
			}
			rs := []passive.Resource{{Name: "cli", Portals: aps}}
			m, err := passive.NewMeter(rs)
			if err != nil {
				return err
			}
			cp, err := capture.Open(iface, passive.Ports(rs)...)
			if err != nil {
				return err
			}
			var pw *capture.PcapWriter
			if pcap != "" {
				f, err := os.Create(pcap)
				if err != nil {
					cp.Close()
					return err
				}
				defer f.Close()
				if pw, err = capture.NewPcapWriter(f); err != nil {
					cp.Close()
					return err
				}
				defer pw.Flush()
				cp.Tap = func(pkt []byte, ts time.Time) { pw.Write(pkt, ts) }
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			if dur > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, dur)
				defer cancel()
			}
			ran := make(chan error, 1)
			go func() { ran <- cp.Run(m.Segment) }()
			out := cmd.OutOrStdout()
			prev, _ := m.Read()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			fmt.Fprintf(out, "%-8s %-40s %7s %9s %7s %9s %9s %9s\n", "time", "initiator", "reads", "read ms", "writes", "write ms", "rd MB/s", "wr MB/s")
			for done := false; !done; {
				select {
				case <-ctx.Done():
					done = true
				case err := <-ran:
					return err
				case <-tick.C:
				}
				cur, _ := m.Read()
				printCaptureRows(out, prev, cur)
				prev = cur
			}
			cp.Close()
			st := cp.Stats()
			pc, gaps := m.Counters()
			fmt.Fprintf(out, "capture: %d segments, %d truncated, %d dropped by the kernel; parser: %d commands, %d completed, %d unmatched, %d expired, %d bytes resynced, %d gaps\n",
				st.Packets, st.Truncated, st.Drops, pc.Commands, pc.Completed, pc.Unmatched, pc.Expired, pc.Resyncs, gaps)
			return <-ran
		},
	}
	f := c.Flags()
	f.StringVar(&iface, "interface", "", "interface to capture on (the bridge port towards the target)")
	f.StringSliceVar(&portals, "portal", nil, "target portal address[:port] (repeatable)")
	f.IntVar(&port, "iscsi-port", 3260, "iSCSI port: the capture filter's, and the portals' default")
	f.DurationVar(&dur, "duration", 0, "stop after this long (default: until interrupted)")
	f.StringVar(&pcap, "pcap", "", "also write the raw packets to this pcap file")
	c.MarkFlagRequired("interface")
	return c
}

// printCaptureRows prints a row per initiator for the interval from prev
// to cur (the meter's readings), in name order; initiators new in cur wait
// for the next interval.
func printCaptureRows(out io.Writer, prev, cur map[string]sample.Counters) {
	for _, n := range slices.Sorted(maps.Keys(cur)) {
		c, p := cur[n], prev[n]
		secs := c.Time.Sub(p.Time).Seconds()
		if p.Device == "" || secs <= 0 {
			continue
		}
		avg := func(ticks, count uint64) string {
			if count == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", float64(ticks)/float64(count))
		}
		fmt.Fprintf(out, "%-8s %-40s %7d %9s %7d %9s %9.2f %9.2f\n", c.Time.Format("15:04:05"), n[len(passive.DevicePrefix):],
			c.Reads-p.Reads, avg(c.ReadTicks-p.ReadTicks, c.Reads-p.Reads), c.Writes-p.Writes, avg(c.WriteTicks-p.WriteTicks, c.Writes-p.Writes),
			float64(c.ReadSectors-p.ReadSectors)*512/secs/1e6, float64(c.WriteSectors-p.WriteSectors)*512/secs/1e6)
	}
}
