package labcli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/lab/guest"
	"github.com/spf13/cobra"
)

// `lab status`: what the lab record says is up, as a table or JSON.

func labStatusCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status",
		Short: "Show the lab, its health and the measured capacity of each resource",
		Long: `Prints the target, the shared resource and its measured capacity, and each
LUN's host and loop device. Exits non-zero when the lab is unhealthy (a
dead tgtd, a missing namespace), naming the problem. With the stock-kernel
guest up ('lab up --kernel debian'), the guest and the lab inside it.`,
		Example: "  sanqos-lab lab status\n  sanqos-lab lab status --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if g, err := guest.Open(guest.LabDirectory()); err == nil && hostSide() {
				args := []string{"lab", "status"}
				if asJSON {
					args = append(args, "--json")
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "stock-kernel guest\t%s (%s, %d MiB, %d vCPUs), QEMU pid %d, up since %s, in %s\n",
						g.Info.Release, g.Info.Accel, g.Info.Memory, g.Info.CPUs, g.Info.PID, g.Info.Started.Format(time.RFC3339), g.Dir)
				}
				script, err := guest.LabScript(g.Dir, args...)
				if err != nil {
					return err
				}
				rc, err := g.Exec(cmd.Context(), script+" 2>&1\n", cmd.OutOrStdout())
				if err == nil && rc != 0 {
					err = fmt.Errorf("the guest's lab is unhealthy (exit %d)", rc)
				}
				return err
			}
			s, err := lab.LoadState()
			if err != nil {
				if left := lab.Leftovers(); len(left) > 0 {
					return fmt.Errorf("lab is down but leftovers exist (%s): run `sanqos-lab lab down`", strings.Join(left, ", "))
				}
				fmt.Fprintln(cmd.OutOrStdout(), "lab is down")
				return nil
			}
			if asJSON {
				e := json.NewEncoder(cmd.OutOrStdout())
				e.SetIndent("", "  ")
				return e.Encode(struct {
					*lab.State
					Problems []string `json:"problems"`
				}{s, s.Health()})
			}
			printStatus(cmd, s)
			if p := s.Health(); len(p) > 0 {
				return fmt.Errorf("lab unhealthy: %s", strings.Join(p, "; "))
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the state as JSON")
	return c
}

func printStatus(cmd *cobra.Command, s *lab.State) {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	kind := fmt.Sprintf("modelled disk group (seek %v, overhead %v, %.0f MB/s, writes cost %.1fx)", s.Options.Model.Seek, s.Options.Model.Overhead, s.Options.Model.Bandwidth/1e6, s.Options.Model.WriteCost)
	if s.Options.RealDisk {
		kind = "this machine's disk"
	}
	for _, t := range s.Options.TargetHosts() {
		if s.Options.TargetKind() == lab.TargetNVMet {
			fmt.Fprintf(w, "target\t%s:%d in netns %s (nvmet, NVMe/TCP, configfs)\n", t.Addr, lab.NVMePort, t.NS)
		} else if s.Options.TargetKind() == lab.TargetLIO {
			fmt.Fprintf(w, "target\t%s:%d in netns %s (LIO, configfs)\n", t.Addr, lab.ISCSIPort, t.NS)
		} else {
			fmt.Fprintf(w, "target\t%s:%d in netns %s (tgtd -C %d)\n", t.Addr, lab.ISCSIPort, t.NS, t.CtlPort)
		}
	}
	if len(s.Options.TargetHosts()) > 1 {
		fmt.Fprintf(w, "etcd\t%s (in netns %s, log %s)\n", lab.EtcdURL(), lab.SwitchNS, lab.EtcdLog())
	}
	if s.Options.TargetKind() == lab.TargetNVMet {
		fmt.Fprintf(w, "initiator\tkernel NVMe/TCP host (each client connects from its namespace; fio on /dev/nvmeXnY)\n")
	} else if s.Options.InitiatorKind() == lab.InitiatorKernel {
		fmt.Fprintf(w, "initiator\tkernel (iscsid in the initial namespace, one iface per client on sq-HOST; fio on /dev/sdX)\n")
	} else {
		fmt.Fprintf(w, "initiator\tlibiscsi (fio in each client namespace)\n")
	}
	fmt.Fprintf(w, "shared resource\t%s\n", kind)
	if s.Options.TargetRmem > 0 {
		fmt.Fprintf(w, "target TCP rmem\t%d bytes (a 64 KiB write spans several window rounds, as in the thesis)\n", s.Options.TargetRmem)
	}
	for i, r := range s.Resources {
		name := r.IQN
		if s.Options.TargetKind() == lab.TargetNVMet {
			name = lab.SubsystemNQN(r)
		}
		fmt.Fprintf(w, "resource %s\t%s\n", r.Name, name)
		if i < len(s.Capacity) {
			c := s.Capacity[i]
			fmt.Fprintf(w, "  capacity\t%.1f MB/s sequential 64 KiB writes (4 streams); %.0f IOPS / %.2f ms random 8 KiB reads (qd 1)\n", c.SeqWriteMBs, c.RandReadIOPS, c.RandReadMs)
		}
		for _, l := range r.LUNs {
			via := s.Options.TargetOf(l.Host).NS
			if l.Device != "" {
				fmt.Fprintf(w, "  LUN %d\t%s (%s, /dev/%s) → /dev/%s via %s\n", l.Number, l.Host, lab.HostAddr(l.Host), l.Device, l.Loop, via)
				continue
			}
			fmt.Fprintf(w, "  LUN %d\t%s (%s) → /dev/%s via %s\n", l.Number, l.Host, lab.HostAddr(l.Host), l.Loop, via)
		}
	}
	w.Flush()
}
