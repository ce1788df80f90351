// Package labcli is the command tree of sanqos-lab, the lab tools: the
// lab (testbed, experiments, the stock-kernel guest), the simulator, tune
// and report. It is apart from sanqos, the binary installed on a storage
// target, so that the product links none of the lab, QEMU guest, FUSE,
// simulator or plotting code; the lab runs the agent from the product
// binary beside it (lab.SanqosExecutable).
//
// Imports (sanqos): agent, internal/cli, internal/editdist,
// internal/nsforward, internal/version, lab, lab/experiments, lab/guest,
// report, sim.
package labcli

import (
	"fmt"

	"github.com/sanqos/sanqos/internal/cli"
	"github.com/sanqos/sanqos/internal/version"
	"github.com/spf13/cobra"
)

// Root is sanqos-lab's command tree.
func Root() *cobra.Command {
	root := &cobra.Command{
		Use:   "sanqos-lab",
		Short: "sanqos' lab tools: the iSCSI testbed, its experiments, the simulator and reports",
		Long: `sanqos-lab builds the lab (a real iSCSI testbed on this machine), runs its
experiments and the simulator, and reports their results. It is not
installed on a storage target: that is the sanqos binary, which the lab
runs for every agent it starts, taking the one beside sanqos-lab (build
both: go build -o bin/ ./cmd/sanqos ./cmd/sanqos-lab).`,
		Example: `  sanqos-lab lab up
  sanqos-lab lab run interference
  sanqos-lab report results/interference/latest
  sanqos-lab sim autonomic
  sanqos-lab lab down`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(versionCmd(), labCmd(), simCmd(), tuneCmd(), reportCmd())
	cli.Setup(root, "    'sanqos-lab lab guest' exits with the guest command's own status.")
	return root
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version",
		Long:    "Prints the version the binary was built from (git describe, set by make build) and its commit.",
		Example: "  sanqos-lab version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "sanqos-lab", version.String())
			return err
		},
	}
}
