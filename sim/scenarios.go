package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// Options control a scenario run.
type Options struct {
	Seed   uint64
	Scale  float64 // durations = thesis' × Scale
	Params Params
	// AgentYAML is extra agent config (e.g. a tuned `pid:` block), as the
	// lab's --agent-yaml.
	AgentYAML  string
	Thresholds []time.Duration
	Out        string // run directory ("" = no files)
}

// DefaultOptions are the thesis' durations (scale 1; the simulator can
// afford them) with the default model.
func DefaultOptions() Options {
	return Options{Seed: 1, Scale: 1, Params: DefaultParams()}
}

func (o Options) scale(d time.Duration) time.Duration { return time.Duration(float64(d) * o.Scale) }

// Scenario is a named simulated experiment.
type Scenario struct {
	Name, Title string
	Run         func(o Options) (any, error)
}

// Scenarios are the lab's experiments the simulator mirrors, plus scale.
var Scenarios = map[string]*Scenario{}

func register(s *Scenario) { Scenarios[s.Name] = s }

// Names lists the scenarios, sorted.
func Names() []string { return slices.Sorted(maps.Keys(Scenarios)) }

func init() {
	register(&Scenario{Name: "interference", Title: "8 KiB random reader at 256 KiB/s vs 0/1/3/12 sequential writers (Fig 5.7)", Run: runInterference})
	register(&Scenario{Name: "pid", Title: "PID with given sets holds 10/15/20 ms under 12 writers toggled on/off (Fig 5.9/5.10)",
		Run: func(o Options) (any, error) { return runControlled(o, pidExperiment) }})
	register(&Scenario{Name: "autonomic", Title: "Same load, sets and indicators discovered automatically (Fig 5.11–5.13)",
		Run: func(o Options) (any, error) { return runControlled(o, autonomicExperiment) }})
	register(&Scenario{Name: "delay-sweep", Title: "one 64 KiB stream's rate vs added delay 0–9.6 ms (Fig 5.5/5.6)", Run: runDelaySweep})
}

// Run runs a scenario and, with o.Out set, writes summary.json,
// trace.csv (where the scenario has one) and plots there.
func Run(name string, o Options) (any, error) {
	s := Scenarios[name]
	if s == nil {
		return nil, fmt.Errorf("no scenario %q (have %s)", name, strings.Join(Names(), ", "))
	}
	if o.Scale <= 0 || o.Scale > 10 {
		return nil, fmt.Errorf("scale %v: want (0, 10]", o.Scale)
	}
	if o.Out != "" {
		if err := os.MkdirAll(o.Out, 0o755); err != nil {
			return nil, err
		}
	}
	sum, err := s.Run(o)
	if err != nil {
		return nil, err
	}
	if o.Out != "" {
		b, err := MarshalSummary(sum)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(o.Out, "summary.json"), b, 0o644); err != nil {
			return nil, err
		}
	}
	return sum, nil
}

// MarshalSummary is summary.json's exact bytes (as the lab writes them).
func MarshalSummary(sum any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(sum); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// labResources is the lab's one resource (vg1) and its LUNs.
func labPhase(name, label string, length, from, to time.Duration) *Phase {
	p := &Phase{Name: name, Label: label, Length: length, From: from, To: to,
		Resources: []Resource{{Name: "vg1", Devices: Devices}}, Hosts: map[string]string{}}
	for i, h := range Hosts {
		p.Hosts[Devices[i]] = h
	}
	return p
}

// reader is the thesis' smalljob: 8 KiB random reads at 256 KiB/s from b2.
func reader(length time.Duration) *Job {
	return &Job{Name: "smalljob", Consumer: HostAddr("b2"), Device: "loop0", Random: true, BS: 8 << 10, IODepth: 1, RateBps: 256 << 10, Length: length}
}

// writers spreads n sequential 64 KiB writer threads over b3..b5 as the
// lab does (fio's libiscsi engine: one I/O in flight per thread).
func writers(n int, start, length, off time.Duration) []*Job {
	return streams(n, Job{Name: "writer", Write: true, BS: 64 << 10, Start: start, Length: length, Off: off})
}

// readers spreads n sequential 64 KiB reader streams (a backup) over
// b3..b5 the same way.
func readers(n int, start, length, off time.Duration) []*Job {
	return streams(n, Job{Name: "backup", BS: 64 << 10, Start: start, Length: length, Off: off})
}

// streams spreads n one-request-at-a-time streams of job over b3..b5,
// each host on its own LUN, the first hosts taking the remainder.
func streams(n int, job Job) []*Job {
	var jobs []*Job
	for i, h := range Hosts[1:] {
		k := n / 3
		if i < n%3 {
			k++
		}
		if k == 0 {
			continue
		}
		j := job
		j.Consumer, j.Device, j.IODepth = HostAddr(h), Devices[i+1], k
		jobs = append(jobs, &j)
	}
	return jobs
}

func readWait(iv sample.Interval) float64 { return iv.ReadWaitMs }
func writeMBs(iv sample.Interval) float64 { return iv.WriteBps / 1e6 }
func readMBs(iv sample.Interval) float64  { return iv.ReadBps / 1e6 }

// movedMBs is what an interferer moves in both directions: the
// throughput a throttle of readers, writers or mixes costs them.
func movedMBs(iv sample.Interval) float64 { return (iv.ReadBps + iv.WriteBps) / 1e6 }

// InterferenceWriters are the thesis' interference levels.
var InterferenceWriters = []int{0, 1, 3, 12}

func runInterference(o Options) (any, error) {
	lead, wrun, tail := o.scale(60*time.Second), o.scale(65*time.Second), o.scale(20*time.Second)
	sum := report.InterferenceSummary{Experiment: "interference", Scale: o.Scale}
	var series []report.Series
	var all []*PhaseResult
	for i, n := range InterferenceWriters {
		p := labPhase(fmt.Sprintf("writers-%d", n), fmt.Sprintf("%d writers", n), lead+wrun+tail, lead, lead+wrun)
		p.Jobs = append([]*Job{reader(lead + wrun + tail)}, writers(n, lead, wrun, 0)...)
		res, err := RunPhase(p, o.Params, o.Seed+uint64(i))
		if err != nil {
			return nil, err
		}
		all = append(all, res)
		waits := report.Values(res.Window(), "b2", readWait)
		d := report.RoundDist(report.Describe(waits))
		sum.Runs = append(sum.Runs, report.InterferenceRun{Writers: n, ReadWaitMs: d,
			WriteMBs: report.Round(report.Aggregate(res.Window(), Hosts[1:], writeMBs), 2), P95PerRepeat: []float64{d.P95}})
		x, y := res.Series("b2", readWait)
		series = append(series, report.Series{Name: p.Label, X: x, Y: report.Smooth(y)})
	}
	if base := sum.Runs[0].ReadWaitMs.P95; base > 0 {
		sum.P95Ratio12 = report.Round(sum.Runs[len(sum.Runs)-1].ReadWaitMs.P95/base, 2)
	}
	if o.Out != "" {
		if err := writeTraceFile(o.Out, all); err != nil {
			return nil, err
		}
		if err := report.TimePlot(filepath.Join(o.Out, "read-wait.png"), "sim: smalljob's read wait vs interfering writers (Fig 5.7)",
			"time (s)", "read wait of b2's LUN (ms, EWMA 0.15)", series, nil); err != nil {
			return nil, err
		}
	}
	return sum, nil
}

func writeTraceFile(dir string, rs []*PhaseResult) error {
	f, err := os.Create(filepath.Join(dir, "trace.csv"))
	if err != nil {
		return err
	}
	if err := WriteTrace(f, rs); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	f, err = os.Create(filepath.Join(dir, "loop.csv"))
	if err != nil {
		return err
	}
	if err := WriteLoop(f, rs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// SweepPoint is one delay's rate (the lab's delay-sweep points).
type SweepPoint struct {
	Direction string  `json:"direction"`
	DelayMs   float64 `json:"delay_ms"`
	MBs       float64 `json:"mb_s"`
	Stderr    float64 `json:"stderr"`
}

// SweepSummary is the simulated delay-sweep's summary.json.
type SweepSummary struct {
	Experiment string             `json:"experiment"`
	Points     []SweepPoint       `json:"points"`
	R2         map[string]float64 `json:"r2"`
	Ratio      map[string]float64 `json:"ratio_max_delay_vs_0"`
}

// SweepDelaysMs are the lab's delay-sweep points.
var SweepDelaysMs = []float64{0, 0.6, 1.6, 2.6, 3.6, 4.6, 5.6, 6.6, 7.6, 8.6, 9.6}

// SweepRate is one 64 KiB stream's MB/s under a fixed delay.
func SweepRate(par Params, write bool, delayMs float64, length time.Duration, seed uint64) (float64, error) {
	p := labPhase("sweep", "sweep", length, 0, length)
	p.Jobs = []*Job{{Name: "sweep", Consumer: HostAddr("b2"), Device: "loop0", Write: write, BS: 64 << 10, IODepth: 1}}
	d := time.Duration(delayMs * 1e6)
	s := throttle.Setting{ReadDelay: d}
	if write {
		s = throttle.Setting{WriteDelay: d}
	}
	p.Fixed = map[netip.Addr]throttle.Setting{HostAddr("b2"): s}
	if d == 0 {
		p.Fixed = nil
	}
	res, err := RunPhase(p, par, seed)
	if err != nil {
		return 0, err
	}
	f := writeMBs
	if !write {
		f = readMBs
	}
	return report.Aggregate(res.Window(), []string{"b2"}, f), nil
}

func runDelaySweep(o Options) (any, error) {
	sum := SweepSummary{Experiment: "delay-sweep", R2: map[string]float64{}, Ratio: map[string]float64{}}
	var bars []report.Bar
	for _, dir := range []string{"read", "write"} {
		var xs, ys []float64
		for i, d := range SweepDelaysMs {
			r, err := SweepRate(o.Params, dir == "write", d, o.scale(20*time.Second), o.Seed+uint64(i))
			if err != nil {
				return nil, err
			}
			sum.Points = append(sum.Points, SweepPoint{Direction: dir, DelayMs: d, MBs: report.Round(r, 3)})
			xs, ys = append(xs, d), append(ys, r)
			bars = append(bars, report.Bar{Label: fmt.Sprintf("%s %.1f", dir[:1], d), Value: r})
		}
		_, _, r2 := report.LinearFit(xs, ys)
		sum.R2[dir] = report.Round(r2, 4)
		if ys[0] > 0 {
			sum.Ratio[dir] = report.Round(ys[len(ys)-1]/ys[0], 3)
		}
	}
	if o.Out != "" {
		if err := report.BarPlot(filepath.Join(o.Out, "rate-vs-delay.png"), "sim: 64 KiB stream rate vs added delay (Fig 5.5/5.6)", "MB/s", bars); err != nil {
			return nil, err
		}
	}
	return sum, nil
}

// errNoLab is returned when a calibration input is missing.
var errNoLab = errors.New("no lab summary")
