package doctor

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/discover"
	"github.com/sanqos/sanqos/internal/quantile"
	"github.com/sanqos/sanqos/sample"
)

// DiskSeries returns n+1 snapshots of the devices' /proc/diskstats
// counters, every apart: what the threshold check measures. SystemDisk
// reads this host's; tests give recorded sequences.
type DiskSeries func(devices []string, every time.Duration, n int) ([]map[string]sample.Counters, error)

// SystemDisk samples h's /proc/diskstats in real time (the check takes
// the whole window).
func SystemDisk(h Host) DiskSeries {
	return func(devices []string, every time.Duration, n int) ([]map[string]sample.Counters, error) {
		d, err := sample.NewDiskstats(h.path("/proc/diskstats"), h.path("/sys"))
		if err != nil {
			return nil, err
		}
		out := make([]map[string]sample.Counters, 0, n+1)
		t := time.NewTicker(every)
		defer t.Stop()
		for i := 0; i <= n; i++ {
			if i > 0 {
				<-t.C
			}
			c, err := d.Read(devices...)
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
		return out, nil
	}
}

// quietShare: an interval moving less than this share of the window's
// highest throughput counts as quiet, its read wait as the floor's.
const quietShare = 0.1

// thresholdCheck measures, over --window, each configured resource's
// floor (the median read wait of its quiet intervals) and its read wait
// at its busiest (threshold: auto's rule, agent.WaitAtPeak, on the
// loaded intervals), and suggests a threshold from them. It only reads
// /proc/diskstats.
func (e *Env) thresholdCheck() Result {
	if !e.configured() {
		return Result{Status: Warn, Summary: "--window measures the config's resources: give --config"}
	}
	topo, err := e.topology()
	if err != nil {
		return Result{Status: Warn, Summary: "resources not mapped to devices: " + err.Error()}
	}
	var devs []string
	for _, v := range topo.Resources {
		devs = append(devs, v.Devices...)
	}
	slices.Sort(devs)
	devs = slices.Compact(devs)
	every := e.Config.Interval
	n := int(e.Window / every)
	if n < 1 || len(devs) == 0 {
		return Result{Status: Warn, Summary: "nothing to measure (no devices, or a window under one interval)"}
	}
	series, err := e.disk()(devs, every, n)
	if err != nil {
		return Result{Status: Warn, Summary: "reading diskstats: " + err.Error()}
	}
	r := Result{Status: OK}
	var sums []string
	for _, name := range slices.Sorted(maps.Keys(topo.Resources)) {
		q := 0.5
		if r, ok := e.resource(name); !ok || r.Objective == "p95" {
			q = 0.95
		}
		m := Measure(series, topo.Resources[name].Devices, q)
		sums = append(sums, name+" "+m.Short())
		r.Detail = append(r.Detail, fmt.Sprintf("resource %s (%s), %d intervals of %v:", name, strings.Join(topo.Resources[name].Devices, " "), m.Intervals, every))
		r.Detail = append(r.Detail, indent(m.Lines(), "  ")...)
		if m.SuggestMs == 0 {
			r.Status = Warn
		}
	}
	r.Summary = fmt.Sprintf("over %v: %s", e.Window, strings.Join(sums, "; "))
	return r
}

// Measurement is one resource's figures over the window.
type Measurement struct {
	Intervals int // with reads
	Quiet     int // quiet intervals (with reads)
	FloorMs   float64
	// PeakMBs is the loaded intervals' peak throughput, BusiestMs their
	// median read wait at 90 % of it or more (over Busy intervals).
	PeakMBs   float64
	BusiestMs float64
	Busy      int
	// SuggestMs is the threshold suggested (0: the window did not show
	// both a quiet and a loaded resource).
	SuggestMs float64
}

// minBusy is how many intervals at the peak a suggestion needs (2 s at
// 100 ms, as threshold: auto).
const minBusy = 20

// Measure applies the rule to a series of diskstats snapshots of the
// resource's devices: per interval, their throughput and reads-weighted
// read wait; q is the wait's quantile at the peak (0.95 for objective
// p95, 0.5 for mean).
func Measure(series []map[string]sample.Counters, devices []string, q float64) Measurement {
	var bps, wait []float64
	for i := 1; i < len(series); i++ {
		var b, ticks, reads float64
		for _, d := range devices {
			p, ok1 := series[i-1][d]
			c, ok2 := series[i][d]
			if !ok1 || !ok2 {
				continue
			}
			iv, err := sample.Diff(p, c)
			if err != nil {
				continue
			}
			b += iv.ReadBps + iv.WriteBps
			if iv.Reads > 0 {
				ticks += iv.ReadWaitMs * float64(iv.Reads)
				reads += float64(iv.Reads)
			}
		}
		if reads > 0 {
			bps, wait = append(bps, b), append(wait, ticks/reads)
		}
	}
	m := Measurement{Intervals: len(bps)}
	if len(bps) == 0 {
		return m
	}
	top := slices.Max(bps)
	var qw, lb, lw []float64
	for i, b := range bps {
		if b < quietShare*top {
			qw = append(qw, wait[i])
		} else {
			lb, lw = append(lb, b), append(lw, wait[i])
		}
	}
	m.Quiet = len(qw)
	if len(qw) > 0 {
		slices.Sort(qw)
		m.FloorMs = round2(quantile.Of(qw, 0.5, quantile.Linear))
	}
	peak, at, busy := agent.WaitAtPeak(lb, lw, q)
	m.PeakMBs, m.Busy = round2(peak/1e6), busy
	if busy > 0 {
		m.BusiestMs = round2(at)
	}
	if m.Quiet > 0 && busy >= minBusy {
		m.SuggestMs = math.Round(math.Max(m.BusiestMs, agent.AutoFloorMin*m.FloorMs)*10) / 10
	}
	return m
}

// Short is the measurement in the summary line.
func (m Measurement) Short() string {
	if m.SuggestMs == 0 {
		return "no suggestion"
	}
	return fmt.Sprintf("floor %.1f ms, busiest %.1f ms, suggest %.1f ms", m.FloorMs, m.BusiestMs, m.SuggestMs)
}

// Lines says what was measured, the suggestion and its rule, or what the
// window lacked.
func (m Measurement) Lines() []string {
	var out []string
	if m.Quiet > 0 {
		out = append(out, fmt.Sprintf("floor %.2f ms: the median read wait of %d quiet intervals (under %.0f %% of the busiest one's throughput)", m.FloorMs, m.Quiet, 100*quietShare))
	} else {
		out = append(out, "floor unknown: no quiet interval in the window (measure over a time that includes one)")
	}
	if m.Busy > 0 {
		out = append(out, fmt.Sprintf("busiest: %.2f MB/s peak, read wait %.2f ms (over the %d intervals at 90 %% of the peak or more)", m.PeakMBs, m.BusiestMs, m.Busy))
	}
	switch {
	case m.SuggestMs > 0:
		out = append(out, fmt.Sprintf("suggested threshold %.1f ms: %s (threshold: auto learns the same online)", m.SuggestMs, agent.AutoRule))
		out = append(out, fmt.Sprintf("a lower threshold protects reads more at the cost of the interferers' throughput; under %.1f ms (1.1 × the floor) it cannot be met (Linux io.latency's method: measure the floor, set the target 10-15 %% above)", 1.1*m.FloorMs))
	case m.Busy < minBusy:
		out = append(out, fmt.Sprintf("no suggestion: %d intervals near the peak, %d needed; measure while the interferers run (e.g. during the backup), with a longer --window", m.Busy, minBusy))
	default:
		out = append(out, "no suggestion without a floor")
	}
	return out
}

// topology maps the config's resources onto devices as the agent would.
func (e *Env) topology() (*agent.Topology, error) {
	if e.Config.Discovery.Source == "static" {
		return agent.StaticDiscoverer(e.Config).Discover()
	}
	_, targets, err := e.readSource(e.Config.Discovery.Source)
	if err != nil {
		return nil, err
	}
	snap := discover.BuildSnapshot(targets, &discover.Resolver{SysRoot: e.Host.path("/sys"), Stat: e.Host.Stat})
	d := agent.SnapshotDiscoverer{Resources: e.Config.Resources, Snap: func() (discover.Snapshot, error) { return snap, nil }}
	topo, err := d.Discover()
	if err == nil && topo == nil {
		err = errors.New("no topology")
	}
	return topo, err
}

// resource is the config's resource name.
func (e *Env) resource(name string) (config.Resource, bool) {
	for _, r := range e.Config.Resources {
		if r.Name == name {
			return r, true
		}
	}
	return config.Resource{}, false
}

// disk is the check's sampler: the Env's, else this host's.
func (e *Env) disk() DiskSeries {
	if e.Disk != nil {
		return e.Disk
	}
	return SystemDisk(e.Host)
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }
