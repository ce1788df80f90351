// Command sanqos is the autonomic QoS controller for iSCSI and other TCP
// storage networks, and the lab that demonstrates it.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := rootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "sanqos:", err)
		os.Exit(1)
	}
}

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "sanqos",
		Short: "Autonomic QoS for iSCSI: keep important I/O under its response-time threshold",
		Long: `sanqos watches each shared storage resource and, when the response time of
important I/O (by default: reads) crosses its threshold, slows down the
consumers that saturate it (by default: writers) with a per-consumer packet
delay on the target's network interface. No initiator is modified and no
packet is dropped; if sanqos dies, traffic flows unthrottled.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(versionCmd(), labCmd(), throttleCmd(), agentCmd(), configCmd(), statusCmd(), reportCmd())
	return root
}
