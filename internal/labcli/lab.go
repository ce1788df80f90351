package labcli

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sanqos/sanqos/internal/nsforward"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/lab/experiments"
	"github.com/sanqos/sanqos/lab/guest"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func labCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "lab",
		Short: "Build, inspect and run experiments on the real iSCSI testbed",
		Long: `The lab is a real iSCSI testbed on this machine: network namespaces bm
(target, running tgtd) and b2..b5 (initiators, running fio with libiscsi)
on a Linux bridge; one iSCSI target per shared resource with one LUN per
initiator; each LUN a loop device on a shared modelled disk group (or, with
--real-disk, on this machine's disk). Needs root.`,
		Example: `  sanqos-lab lab up
  sanqos-lab lab run autonomic
  sanqos-lab lab down`,
	}
	c.AddCommand(labUpCmd(), labDownCmd(), labStatusCmd(), labServeCmd(), labRunCmd(), labDashboardCmd(), labGuestCmd())
	return c
}

func labUpCmd() *cobra.Command {
	o := lab.DefaultOptions()
	var g guest.Options
	var kernel string
	c := &cobra.Command{
		Use:   "up",
		Short: "Build the lab (idempotent)",
		Long: `Creates the namespaces, bridge, tgtd (supervised by 'lab serve'), targets,
LUNs on the modelled disk group (or this machine's disk), then measures the
resource's capacity, recording each object as it creates it
(/run/sanqos-lab/record, what 'lab down' removes). Running it again on a
healthy lab changes nothing; a half-broken lab is rebuilt. It refuses to
build over a running lab that its record does not own (say, one an older
sanqos built): 'lab down' removes that first.

With --kernel debian the same lab is built inside a QEMU guest running
Debian's stock kernel (netem, fq, LIO as modules; see 'sanqos-lab lab guest'),
which stays up in the background (state in ` + guest.LabDir + `): later 'lab run',
'lab status' and 'lab down' act on it. The guest runs under TCG, 10-30x
slower than this machine, so its lab is scaled down unless the flags say
otherwise: ` + strings.Join(guestUpDefaults, " ") + `.

There, --target lio serves the LUNs from the kernel's LIO (configured
through configfs, the portal made inside bm) instead of tgtd, and
--initiator kernel replaces fio's libiscsi engine with open-iscsi's kernel
initiator: one iscsid in the guest's initial namespace (the kernel's iSCSI
netlink exists only there), one interface and iface per client with the
client's address, fio with libaio on each session's /dev/sdX. --target
nvmet --initiator kernel builds it over NVMe/TCP: the kernel's NVMe
target (configfs: one subsystem per resource, one namespace per client,
port 4420 inside bm) and its NVMe/TCP host, each client connecting from
its own namespace, fio on /dev/nvmeXnY.`,
		Example: `  sanqos-lab lab up
  sanqos-lab lab up --real-disk
  sanqos-lab lab up --resources vg1,vg2 --disk-seek 8ms
  sanqos-lab lab up --targets 3     # three target hosts and etcd: cluster-autonomic
  sanqos-lab lab up --kernel debian
  sanqos-lab lab up --kernel debian --target lio --initiator kernel
  sanqos-lab lab up --kernel debian --target nvmet --initiator kernel`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kernel != "" {
				return labUpGuest(cmd, g, kernel)
			}
			defer lab.Watchdog("lab up", lab.Limits.Up, cmd.ErrOrStderr())()
			s, err := lab.Up(o, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			printStatus(cmd, s)
			return nil
		},
	}
	f := c.Flags()
	f.StringSliceVar(&o.Resources, "resources", o.Resources, "shared resources (one iSCSI target each)")
	f.Int64Var(&o.LUNSize, "lun-size", o.LUNSize, "bytes per LUN")
	f.BoolVar(&o.RealDisk, "real-disk", false, "back the LUNs by files on this machine's disk instead of the modelled disk group")
	f.DurationVar(&o.Model.Seek, "disk-seek", o.Model.Seek, "modelled positioning time of a non-sequential request")
	f.DurationVar(&o.Model.Overhead, "disk-overhead", o.Model.Overhead, "modelled fixed cost per request")
	f.Float64Var(&o.Model.Bandwidth, "disk-bandwidth", o.Model.Bandwidth, "modelled transfer rate, bytes/s")
	f.Float64Var(&o.Model.WriteCost, "disk-write-cost", o.Model.WriteCost, "modelled transfer-time multiplier of writes (parity/mirror cost)")
	f.IntVar(&o.Targets, "targets", 1, fmt.Sprintf("target hosts (namespaces bm, bm2, …, each with its own tgtd) in front of the shared resources, 1..%d; with more than one, an etcd server for `sanqos agent --etcd` runs on the lab bridge (experiment cluster-autonomic)", lab.MaxTargets))
	f.IntVar(&o.TargetRmem, "target-rmem", o.TargetRmem, "cap the target's TCP receive buffer (bytes, 0 = kernel default); see README \"The lab\"")
	f.StringVar(&o.Target, "target", "", "target: tgt (tgtd, default), lio (the kernel's LIO through configfs) or nvmet (the kernel's NVMe/TCP target; with --initiator kernel); lio and nvmet in the stock-kernel guest")
	f.StringVar(&o.Initiator, "initiator", "", "clients' initiator: libiscsi (fio's engine in each client namespace, default) or kernel (open-iscsi, fio on the block device; stock-kernel guest only)")
	f.StringVar(&kernel, "kernel", "", "build the lab in a QEMU guest on this kernel: debian (the newest /boot/vmlinuz-*) or an image's path")
	f.StringVar(&g.Accel, "accel", "tcg", "--kernel: QEMU accelerator, tcg or kvm")
	f.IntVar(&g.MemoryMiB, "memory", 3072, "--kernel: guest memory, MiB (the LUNs live in it)")
	f.IntVar(&g.CPUs, "cpus", 2, "--kernel: guest vCPUs")
	return c
}

// hostSide reports whether this sanqos runs on the host, not in the
// stock-kernel guest: in the guest, /run/sanqos-guest is the shared work
// directory, whose guest.json names a QEMU the guest cannot see, and the
// lab commands act on the guest's own lab.
func hostSide() bool { return lab.GuestAccel() == "" }

// guestUpDefaults are lab up's flags in the stock-kernel guest unless
// given: LUNs small enough for the guest's memory, and a disk group
// slow enough (4 MB/s) that the modelled disk, not TCG's CPU, is the
// bottleneck, so the relative effects the experiments measure hold.
var guestUpDefaults = []string{"--lun-size=134217728", "--disk-bandwidth=4e6", "--disk-seek=1ms"}

// guestFlags are the flags of cmd the user set, for the same command in
// the guest, except those named in skip.
func guestFlags(cmd *cobra.Command, skip ...string) []string {
	var out []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if slices.Contains(skip, f.Name) {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() {
				out = append(out, "--"+f.Name+"="+v)
			}
			return
		}
		out = append(out, "--"+f.Name+"="+f.Value.String())
	})
	return out
}

// notGiven are the flags of defaults (--name=value) that cmd's user did
// not set.
func notGiven(cmd *cobra.Command, defaults []string) []string {
	return slices.DeleteFunc(slices.Clone(defaults), func(d string) bool {
		name, _, _ := strings.Cut(strings.TrimPrefix(d, "--"), "=")
		return cmd.Flags().Changed(name)
	})
}

func labUpGuest(cmd *cobra.Command, g guest.Options, kernel string) error {
	if os.Geteuid() != 0 {
		return lab.ErrNotRoot
	}
	switch {
	case kernel == "debian":
	case strings.HasPrefix(kernel, "/"):
		g.Kernel = kernel
	default:
		return fmt.Errorf("--kernel %q: want debian or the path of a kernel image", kernel)
	}
	self, sanqos, err := labBinaries()
	if err != nil {
		return err
	}
	args := append(guestFlags(cmd, "kernel", "accel", "memory", "cpus"), notGiven(cmd, guestUpDefaults)...)
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err = guest.UpLab(ctx, g, self, sanqos, args, cmd.OutOrStdout())
	return err
}

// labBinaries are this sanqos-lab and the sanqos it runs agents from,
// for the stock-kernel guest.
func labBinaries() (self, sanqos string, err error) {
	if self, err = os.Executable(); err != nil {
		return "", "", err
	}
	sanqos, err = lab.SanqosExecutable()
	return self, sanqos, err
}

func labDownCmd() *cobra.Command {
	var force bool
	var kernel string
	c := &cobra.Command{
		Use:   "down",
		Short: "Remove everything the lab made (also after a crash)",
		Long: `Removes what the lab's record says it made (/run/sanqos-lab/record: the
supervisor and tgtd by pid and start time, mounts, loop devices,
namespaces), whatever the binary that made it is called and however its
'lab up' ended; then every lab object no live lab owns, found by label
(fixed namespace names, files under /run/sanqos-lab and
/dev/shm/sanqos-lab, tgtd's control ports, the supervisor's environment).
It says what it removed. Refuses while an experiment runs unless --force.

If the stock-kernel guest ('lab up --kernel debian') is up, or left
something, it is what goes: QEMU is powered off with the lab in it and
` + guest.LabDir + ` removed; the host's lab, if any, is untouched
(--kernel host takes that down instead).`,
		Example: "  sanqos-lab lab down\n  sanqos-lab lab down --force   # even while an experiment runs",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch kernel {
			case "":
				if hostSide() && len(guest.Leftovers(guest.LabDirectory())) > 0 {
					return guest.DownLab(guest.LabDirectory(), force, cmd.OutOrStdout())
				}
			case "debian", "guest":
				return guest.DownLab(guest.LabDirectory(), force, cmd.OutOrStdout())
			case "host":
			default:
				return fmt.Errorf("--kernel %q: want host or debian", kernel)
			}
			defer lab.Watchdog("lab down", lab.Limits.Down, cmd.ErrOrStderr())()
			if force {
				return lab.ForceDown(cmd.OutOrStdout())
			}
			return lab.Down(cmd.OutOrStdout())
		},
	}
	c.Flags().BoolVar(&force, "force", false, "tear down even while an experiment is running")
	c.Flags().StringVar(&kernel, "kernel", "", "which lab: host, or debian (the stock-kernel guest); default the guest if one is up, else the host's")
	return c
}

func labServeCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "serve",
		Short:  "Run the lab supervisor (started by `lab up`)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.Serve(slog.New(slog.NewTextHandler(os.Stderr, nil)))
		},
	}
}

func labRunCmd() *cobra.Command {
	o := experiments.Options{RunOptions: lab.RunOptions{Results: "results", Repeat: 1}}
	var kernel string
	var protocols []string
	c := &cobra.Command{
		Use:   "run NAME",
		Short: "Run an experiment and write results/NAME/RUN/",
		Long: "Runs an experiment on the lab (bring it up first with `sanqos-lab lab up`) and\n" +
			"writes results/NAME/RUN-ID/: trace.csv (one row per device per 100 ms),\n" +
			"per-host fio job files, JSON output and logs, summary.json, PNG plots and\n" +
			"report.html (one page: figures and summary tables; see `sanqos-lab report`).\n\n" +
			"While the stock-kernel guest is up (`sanqos-lab lab up --kernel debian`), the\n" +
			"experiment runs in its lab and the results are copied back here, their\n" +
			"summary.json naming the accelerator and kernel (--kernel host: the host's lab).\n" +
			"pid and autonomic take --writers, --cycles and --no-oracle to fit TCG.\n\n" +
			"To watch the controller live, open the agent's dashboard while a pid or\n" +
			"autonomic run is going (see `sanqos agent --help`).\n\nExperiments:\n" + experiments.Help(),
		Example: `  sanqos-lab lab run interference
  sanqos-lab lab run interference --scale 1 --repeat 3
  sanqos-lab lab run equal-share --scale 0.1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Progress = os.Stderr
			var dir string
			var err error
			g, gerr := guest.Open(guest.LabDirectory())
			switch {
			case kernel != "" && kernel != "host" && kernel != "debian":
				return fmt.Errorf("--kernel %q: want host or debian", kernel)
			case gerr == nil && kernel != "host" && hostSide():
				dir, err = labRunGuest(cmd, g, args[0], o)
			case kernel == "debian":
				return fmt.Errorf("%w: bring it up with `sanqos-lab lab up --kernel debian`", gerr)
			case kernel == "" && hostSide() && len(guest.Leftovers(guest.LabDirectory())) > 0:
				// A guest lab was up and is gone: running on the host's lab
				// instead would be a surprise.
				return fmt.Errorf("%w: `sanqos-lab lab down` clears what it left; then `sanqos-lab lab up --kernel debian`, or --kernel host for the host's lab", gerr)
			default:
				// Ctrl-C cancels the run cleanly; a second one kills it.
				ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
				context.AfterFunc(ctx, stop)
				if len(protocols) > 0 {
					dir, err = runProtocols(ctx, args[0], o, protocols, cmd.ErrOrStderr())
					break
				}
				dir, err = experiments.RunExperiment(ctx, args[0], o)
			}
			if dir != "" {
				fmt.Fprintln(cmd.OutOrStdout(), "results:", dir)
			}
			if err != nil {
				return err
			}
			b, err := os.ReadFile(dir + "/summary.json")
			if err == nil {
				cmd.OutOrStdout().Write(b)
				fmt.Fprintln(cmd.OutOrStdout(), "report:", dir+"/report.html")
			}
			return err
		},
	}
	f := c.Flags()
	f.Float64Var(&o.Scale, "scale", 0, "multiply the thesis' durations (0: the experiment's default, short enough for CI)")
	f.IntVar(&o.Repeat, "repeat", 1, "repeat each phase to report run-to-run spread")
	f.StringVar(&o.Results, "results", o.Results, "results root directory")
	f.StringVar(&o.RunID, "run-id", "", "name of the run directory (default: UTC timestamp)")
	f.StringVar(&o.Resource, "resource", "", "resource to load (default: the first)")
	f.BoolVar(&o.NoStallWatch, "no-stall-watch", false, "run without the stall watch (one real-time thread per CPU, 500 wake-ups a second each, timing the machine for host_cpu.stalls), to measure what it costs")
	experiments.AddFlags(f, &o)
	f.StringArrayVar(&lab.AgentFlags, "agent-flag", nil, "flag added to every agent the run starts, e.g. --agent-flag=--delay-ramp=0.5 (repeatable)")
	f.StringVar(&kernel, "kernel", "", "which lab: host, or debian (the stock-kernel guest); default the guest if one is up, else the host's")
	f.StringSliceVar(&protocols, "protocol", nil, "run once per protocol, iscsi (LIO) and/or nvme-tcp (nvmet), each on the kernel's initiator, rebuilding the guest's lab for each; results/NAME/RUN/PROTOCOL, and RUN/summary.json sets them side by side")
	return c
}

// labRunGuest runs the experiment in the stock-kernel guest's lab and
// copies its results to the host's results directory.
func labRunGuest(cmd *cobra.Command, g *guest.Guest, name string, o experiments.Options) (string, error) {
	if _, err := experiments.Lookup(name); err != nil {
		return "", err
	}
	o.RunID = cmp.Or(o.RunID, time.Now().UTC().Format("20060102-150405"))
	// The guest runs the experiment with this sanqos-lab and its sanqos.
	self, sanqos, err := labBinaries()
	if err != nil {
		return "", err
	}
	if err := guest.InstallLab(g.Dir, self, sanqos); err != nil {
		return "", err
	}
	flags := guestFlags(cmd, "results", "run-id", "kernel")
	added := notGiven(cmd, guestRunDefaults[name])
	fmt.Fprintf(os.Stderr, "running %s in the stock-kernel guest (%s, %s)\n", name, g.Info.Release, g.Info.Accel)
	if len(added) > 0 && g.Info.Accel == "tcg" {
		flags = append(flags, added...)
		fmt.Fprintf(os.Stderr, "scaled for TCG unless given: %s\n", strings.Join(added, " "))
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return g.RunLab(ctx, name, flags, o.Results, o.RunID, os.Stderr)
}

// guestRunDefaults are the experiments' flags in a TCG guest unless
// given. The guest's lab (a 4 MB/s disk group with 1 ms seeks, the
// writers writing 8 KiB: experiments.writerBS) has the reader wait ~8 ms p95
// alone and ~54 ms under the thesis' twelve writers, so 5 ms is out of
// reach and 10 ms within 1.3× of the floor; 15 and 20 ms are the
// thresholds that mean something there. The thesis' own timing (scale 1:
// 25 s of writes, 5 s off) with two load cycles instead of six: at the
// lab's default scale of 0.25 a load step lasts 6 s, so the second or so
// that every step's onset takes to bring under control is a sixth of the
// time and decides the p95 by itself (guest runs 20261125-181430 and
// -183316: at 15 ms, p95 1.20–1.73× the threshold at scale 0.25 with six
// cycles, 1.13–1.24× at scale 1 with two). No oracle keeps a run to about
// five minutes (its search adds ~6 minutes per threshold at scale 1;
// `--no-oracle=false` runs it).
var guestRunDefaults = map[string][]string{
	"autonomic": {"--scale=1", "--cycles=2", "--thresholds=15ms", "--thresholds=20ms", "--no-oracle=true"},
	"pid":       {"--scale=1", "--cycles=2", "--thresholds=15ms", "--thresholds=20ms"},
}

func labDashboardCmd() *cobra.Command {
	listen, to, ns := "127.0.0.1:9311", "127.0.0.1:9311", lab.TargetNS
	c := &cobra.Command{
		Use:   "dashboard",
		Short: "Open the lab agent's dashboard from this namespace",
		Long: `The experiments' agent (pid, autonomic, ...) runs in the target namespace
bm and serves its dashboard there on 127.0.0.1:9311, out of a browser's
reach. This forwards --listen here to that address inside bm, one new
connection per browser connection, until Ctrl-C. Start it, open the URL
it prints, then run an experiment: the page reconnects by itself whenever
the run restarts the agent (once per threshold).`,
		Example: `  sanqos-lab lab dashboard &
  sanqos-lab lab run autonomic
  # open http://127.0.0.1:9311/ ; from another machine:
  ssh -L 9311:127.0.0.1:9311 lab-host`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("%w (another agent or forwarder here? use --listen)", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "dashboard: http://%s/ (forwarding to %s in netns %s; Ctrl-C stops)\n", l.Addr(), to, ns)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return nsforward.Serve(ctx, l, "/run/netns/"+ns, to, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		},
	}
	c.Flags().StringVar(&listen, "listen", listen, "address to open in the browser (this namespace)")
	c.Flags().StringVar(&to, "to", to, "the agent's HTTP address inside the namespace")
	c.Flags().StringVar(&ns, "netns", ns, "network namespace of the agent")
	return c
}
