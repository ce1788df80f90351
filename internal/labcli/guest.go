package labcli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sanqos/sanqos/internal/cli"
	"github.com/sanqos/sanqos/lab/guest"
	"github.com/spf13/cobra"
)

func labGuestCmd() *cobra.Command {
	var o guest.Options
	var verbose bool
	c := &cobra.Command{
		Use:   "guest -- COMMAND [ARG...]",
		Short: "Run a command on Debian's stock kernel, in a QEMU guest on this machine's root",
		Long: `Boots the newest /boot/vmlinuz-* (Debian's linux-image-amd64: netem, fq,
LIO and the kernel iSCSI initiator as modules) in a QEMU guest that sees
this machine's root filesystem read-only, runs COMMAND there as root with
the work directory (--dir, shared read-write at the same path) as its
current directory, prints its output and exits with its exit code. The
guest has no network device; everything it writes outside the work
directory is in its own memory. TCG boots to a shell in ~6 s here; KVM
(--accel kvm) only where the host's CPU lets a guest run.`,
		Example: `  sanqos-lab lab guest -- uname -r
  sanqos-lab lab guest -- sh -c 'modprobe sch_fq && sanqos throttle backends'
  sanqos-lab lab guest --dir /tmp/run -- ./throttle.test -test.run EDT -test.v`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if verbose {
				o.Console = cmd.ErrOrStderr()
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, err := guest.Run(ctx, o, "exec "+guest.Quote(args...)+"\n")
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), res.Output)
			fmt.Fprintf(cmd.ErrOrStderr(), "guest: %s (%s) in %v, exit %d\n", res.Kernel, res.Accel, res.Elapsed.Round(100*time.Millisecond), res.ExitCode)
			if res.ExitCode != 0 {
				cmd.SilenceUsage, cmd.SilenceErrors = true, true
				return cli.ExitCodeError(res.ExitCode)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.Accel, "accel", "tcg", "tcg (software, boots everywhere) or kvm")
	f.StringVar(&o.Dir, "dir", "", "work directory shared with the guest (default: a temporary one)")
	f.IntVar(&o.MemoryMiB, "memory", 2048, "guest memory, MiB")
	f.IntVar(&o.CPUs, "cpus", 2, "guest vCPUs")
	f.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "give up after this long")
	f.BoolVarP(&verbose, "verbose", "v", false, "show the guest's console (kernel messages)")
	return c
}
