package lab

import (
	"github.com/prometheus/procfs"
	"github.com/sanqos/sanqos/report"
)

// hostCPU reads the machine's CPU totals. Every process of the lab (target,
// initiators, agent) shares this machine's CPUs, and steal is the time the
// hypervisor ran something else while a vCPU had work: both explain a late
// ACK or a late release that the code under test did not cause.
func hostCPU() (procfs.CPUStat, error) {
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		return procfs.CPUStat{}, err
	}
	s, err := fs.Stat()
	return s.CPUTotal, err
}

// hostCPUUse is what the machine did between two readings, as shares of all
// CPUs' time: busy (user, system, interrupts) and stolen by the host.
func hostCPUUse(a, b procfs.CPUStat) report.HostCPU {
	d := func(x, y float64) float64 { return max(y-x, 0) }
	busy := d(a.User, b.User) + d(a.Nice, b.Nice) + d(a.System, b.System) + d(a.IRQ, b.IRQ) + d(a.SoftIRQ, b.SoftIRQ)
	steal := d(a.Steal, b.Steal)
	total := busy + steal + d(a.Idle, b.Idle) + d(a.Iowait, b.Iowait)
	if total <= 0 {
		return report.HostCPU{}
	}
	return report.HostCPU{BusyPct: report.Round(100*busy/total, 1), StealPct: report.Round(100*steal/total, 2)}
}

// phaseHost watches the machine through a phase: its CPU use, and its
// stalls where the stall watch could start (it needs real-time priority;
// without it the phase runs unwatched, which its summary shows by having
// no stalls).
type phaseHost struct {
	cpu0   procfs.CPUStat
	cpuErr error
	sw     *StallWatch
}

func watchHost(stalls bool) *phaseHost {
	h := &phaseHost{}
	h.cpu0, h.cpuErr = hostCPU()
	if stalls {
		h.sw, _ = StartStallWatch()
	}
	return h
}

// end stops the stall watch, if any; a no-op after stop.
func (h *phaseHost) end() {
	if h.sw != nil {
		h.sw.Stop()
	}
}

// stop ends the watch and puts what it saw in res, the stalls also in
// the CSV at path.
func (h *phaseHost) stop(res *PhaseResult, path string) error {
	if cpu1, err := hostCPU(); err == nil && h.cpuErr == nil {
		res.Host = hostCPUUse(h.cpu0, cpu1)
	}
	if h.sw == nil {
		return nil
	}
	stalls, err := h.sw.Stop()
	if err != nil {
		return nil // a thread failed midway: unwatched, as without one
	}
	res.Stalls = stalls
	res.Host = withStalls(res.Host, stalls)
	return writeStalls(path, stalls)
}
