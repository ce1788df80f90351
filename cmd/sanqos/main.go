// Command sanqos is the autonomic QoS controller for iSCSI and other TCP
// storage networks: the binary installed on a storage target. The lab,
// the simulator and the reports are sanqos-lab's (cmd/sanqos-lab); a test
// (TestProductLinksNoLab) keeps them out of this one.
//
// Imports (sanqos): advise, agent, capture, cluster, config, control,
// dashboard, discover, doctor, internal/cli, internal/version, nvmetcp,
// passive, sample, throttle.
package main

import (
	"github.com/sanqos/sanqos/internal/cli"
	"github.com/spf13/cobra"
)

func main() { cli.Main(rootCmd()) }

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "sanqos",
		Short: "Autonomic QoS for iSCSI: keep important I/O under its response-time threshold",
		Long: `sanqos watches each shared storage resource and, when the response time of
important I/O (by default: reads) crosses its threshold, slows down the
consumers that saturate it (by default: writers) with a per-consumer packet
delay on the target's network interface. No initiator is modified and no
packet is dropped; if sanqos dies, traffic flows unthrottled.

Start with 'sanqos doctor --config FILE' (could the agent run here, and
if not, why; it changes nothing), then 'sanqos agent --help'. Operators watch it with the dashboard
(http://127.0.0.1:9311/ on the agent's host), 'sanqos status', or
Prometheus (/metrics, Grafana dashboard in grafana/). The lab, its
experiments and the simulator are another binary's, sanqos-lab (make lab).`,
		Example: `  sanqos doctor --config /etc/sanqos/sanqos.yaml
  sanqos agent --config /etc/sanqos/sanqos.yaml
  sanqos status --watch
  sanqos throttle set 10.99.0.3 --write-delay 2ms
  sanqos completion bash > /etc/bash_completion.d/sanqos`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(versionCmd(), clusterCmd(), throttleCmd(), agentCmd(), configCmd(), cleanupCmd(), statusCmd(), reloadCmd(),
		adviseCmd(), captureCmd(), doctorCmd(), manpagesCmd())
	cli.Setup(root, "")
	cli.Moved(root, "sanqos-lab", "lab", "sim", "tune", "report")
	return root
}
