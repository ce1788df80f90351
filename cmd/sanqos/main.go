// Command sanqos is the autonomic QoS controller for iSCSI and other TCP
// storage networks, and the lab that demonstrates it.
//
// Imports (sanqos): advise, agent, capture, cluster, config, control,
// dashboard, discover, doctor, internal/editdist, internal/nsforward,
// internal/version, lab, lab/experiments, lab/guest, passive, report,
// sample, sim, throttle.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sanqos/sanqos/config"
	"github.com/spf13/cobra"
)

func main() {
	cmd, err := rootCmd().ExecuteC()
	if err == nil {
		return
	}
	printError(os.Stderr, cmd.CommandPath(), err)
	os.Exit(exitCode(err))
}

// printError says why command path failed.
func printError(w io.Writer, path string, err error) {
	switch {
	case errors.As(err, new(exitCodeError)):
		// lab guest: the guest command's own exit code; its output said why.
	case errors.As(err, new(config.Errors)):
		// A config's errors, one a line, each FILE:LINE: first, as a
		// compiler prints them, for editors and grep.
		fmt.Fprintln(w, err)
	case exitCode(err) == exitUsage:
		sep := "\n"
		if strings.Contains(err.Error(), "\n") {
			sep = "\n\n" // after a list of suggestions
		}
		fmt.Fprintf(w, "sanqos: %v%sRun '%s --help' for usage.\n", err, sep, path)
	default:
		fmt.Fprintln(w, "sanqos:", err)
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
packet is dropped; if sanqos dies, traffic flows unthrottled.

Start with 'sanqos doctor --config FILE' (could the agent run here, and
if not, why; it changes nothing), then 'sanqos agent --help'. Operators watch it with the dashboard
(http://127.0.0.1:9311/ on the agent's host), 'sanqos status', or
Prometheus (/metrics, Grafana dashboard in grafana/).`,
		Example: `  sanqos doctor --config /etc/sanqos/sanqos.yaml
  sanqos agent --config /etc/sanqos/sanqos.yaml
  sanqos status --watch
  sanqos throttle set 10.99.0.3 --write-delay 2ms
  sanqos report results/autonomic/latest
  sanqos completion bash > /etc/bash_completion.d/sanqos`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(versionCmd(), clusterCmd(), labCmd(), throttleCmd(), agentCmd(), configCmd(), cleanupCmd(), statusCmd(), reloadCmd(), reportCmd(),
		simCmd(), tuneCmd(), adviseCmd(), captureCmd(), doctorCmd(), manpagesCmd())
	completionHelp(root)
	root.SetHelpCommand(helpCmd())
	wireUsage(root)
	root.SetHelpTemplate(manHelp)
	return root
}
