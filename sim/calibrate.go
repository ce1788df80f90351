package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/sanqos/sanqos/report"
)

// LabRuns are the lab summaries calibration reads.
type LabRuns struct {
	InterferenceDir string                     `json:"interference"`
	DelaySweepDir   string                     `json:"delay_sweep"`
	PIDDir          string                     `json:"pid"`
	Interference    report.InterferenceSummary `json:"-"`
	Sweep           SweepSummary               `json:"-"`
	PID             *report.ControlledSummary  `json:"-"`
}

// FindLabRuns picks, under a results directory, the newest run of each
// experiment that is usable: an interference run whose reader waits at
// least 1 ms alone (a run on a RAM disk or page cache is not the modelled
// group and would calibrate nonsense), a delay-sweep with both
// directions, a pid run with regulated thresholds (optional).
func FindLabRuns(results string) (*LabRuns, error) {
	lr := &LabRuns{}
	var err error
	if lr.InterferenceDir, err = newest(results, "interference", &lr.Interference, func(s *report.InterferenceSummary) bool {
		return len(s.Runs) == len(InterferenceWriters) && s.Runs[0].ReadWaitMs.P50 >= 1
	}); err != nil {
		return nil, err
	}
	if lr.DelaySweepDir, err = newest(results, "delay-sweep", &lr.Sweep, func(s *SweepSummary) bool { return len(s.Points) >= 4 }); err != nil {
		return nil, err
	}
	var pid report.ControlledSummary
	if lr.PIDDir, _ = newest(results, "pid", &pid, func(s *report.ControlledSummary) bool { return len(s.Regulated) > 0 }); lr.PIDDir != "" {
		lr.PID = &pid
	}
	return lr, nil
}

// newest returns the newest run directory (by name: run ids are
// timestamps) of an experiment whose summary.json decodes and passes ok,
// and decodes it into into.
func newest[T any](results, exp string, into *T, ok func(*T) bool) (string, error) {
	dirs, _ := filepath.Glob(filepath.Join(results, exp, "2*"))
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		var v T
		if b, err := os.ReadFile(filepath.Join(d, "summary.json")); err == nil && json.Unmarshal(b, &v) == nil && ok(&v) {
			*into = v
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: no usable %s run under %s", errNoLab, exp, results)
}

// Calibration is the result of fitting the model to a lab run.
type Calibration struct {
	Lab    *LabRuns `json:"lab_runs"`
	Params Params   `json:"params"`
	// Method says how each parameter was found.
	Method []string `json:"method"`
	// Interference and PID compare the calibrated model with the lab:
	// p95 read wait (ms) per writer count / threshold, and the error.
	Interference []Compare `json:"interference"`
	PID          []Compare `json:"pid,omitempty"`
	// MeanAbsP95ErrPct is the mean |sim − lab| / lab of the p95s above.
	InterferenceErrPct float64 `json:"interference_mean_abs_p95_err_pct"`
	PIDErrPct          float64 `json:"pid_mean_abs_p95_err_pct,omitempty"`
	Evaluations        int     `json:"evaluations"`
}

// Compare is one point of the lab-vs-sim comparison.
type Compare struct {
	Case       string  `json:"case"`
	LabP95     float64 `json:"lab_p95_ms"`
	SimP95     float64 `json:"sim_p95_ms"`
	ErrPct     float64 `json:"p95_err_pct"`
	LabWrite   float64 `json:"lab_write_mb_s"`
	SimWrite   float64 `json:"sim_write_mb_s"`
	WriteErrPc float64 `json:"write_err_pct"`
}

func cmp(name string, lp, sp, lw, sw float64) Compare {
	c := Compare{Case: name, LabP95: lp, SimP95: sp, LabWrite: lw, SimWrite: sw}
	if lp > 0 {
		c.ErrPct = report.Round(100*(sp-lp)/lp, 1)
	}
	if lw > 0 {
		c.WriteErrPc = report.Round(100*(sw-lw)/lw, 1)
	}
	return c
}

// Calibrate fits the model to the lab. The disk's constants (overhead,
// seek, bandwidth) are the lab disk model's own configuration and stay.
//
//  1. TCP: the lab's delay-sweep gives time per 64 KiB request against
//     delay; a least-squares line's slope is bytes/window per direction
//     (rounds of added delay per request), its intercept the undelayed
//     request time, from which the wire rate follows once the disk's part
//     is known.
//  2. Disk and stack: WriteCost, DeviceLatency and the write wire rate
//     are searched (coordinate descent on a log scale, fixed seed) to
//     minimise the squared relative error of the interference run's p95
//     read wait at 0/1/3/12 writers and its write MB/s.
func Calibrate(lr *LabRuns, seed uint64) (*Calibration, error) {
	p := DefaultParams()
	c := &Calibration{Lab: lr}
	if err := c.fitTCP(lr.Sweep, &p); err != nil {
		return nil, err
	}
	lab := lr.Interference
	p = c.fitDisk(lab, p, seed)
	c.Params = p
	if err := c.compareInterference(lab, p, seed); err != nil {
		return nil, err
	}
	if lr.PID != nil {
		if err := c.comparePID(lr.PID, p, seed); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// fitTCP is Calibrate's step 1: the TCP windows, and the read wire rate,
// fitted to the delay sweep's time per request.
func (c *Calibration) fitTCP(sweep SweepSummary, p *Params) error {
	const bs = 65536.0
	for _, dir := range []string{"read", "write"} {
		var xs, ys []float64
		for _, pt := range sweep.Points {
			if pt.Direction == dir && pt.MBs > 0 {
				xs, ys = append(xs, pt.DelayMs), append(ys, bs/(pt.MBs*1e6)*1e3) // ms per request
			}
		}
		icept, slope, _ := report.LinearFit(xs, ys)
		if !(slope > 0) {
			return fmt.Errorf("delay-sweep %s: time per request does not grow with delay (slope %v)", dir, slope)
		}
		if dir == "read" {
			p.ReadWindow = bs / slope
			c.Method = append(c.Method, fmt.Sprintf("read: %.2f rounds of delay per 64 KiB (window %.0f B), %.2f ms undelayed, from %d sweep points", slope, p.ReadWindow, icept, len(xs)))
			// undelayed = disk (sequential read) + stack + RTT·1.5 + wire
			wire := icept - ms(p.service(false, true, bs)) - ms(p.DeviceLatency) - 1.5*ms(p.RTT)
			p.ReadNetBps = bs / math.Max(wire, 0.05) * 1e3
		} else {
			p.WriteWindow = bs / slope
			c.Method = append(c.Method, fmt.Sprintf("write: %.2f rounds of delay per 64 KiB (window %.0f B), %.2f ms undelayed, from %d sweep points", slope, p.WriteWindow, icept, len(xs)))
		}
	}
	return nil
}

// fitDisk is Calibrate's step 2: p with the disk and stack knobs that best
// fit the lab's interference run, by coordinate descent.
func (c *Calibration) fitDisk(lab report.InterferenceSummary, p Params, seed uint64) Params {
	cost := func(q Params) float64 {
		c.Evaluations++
		s, err := simInterference(q, seed, 0.5)
		if err != nil {
			return math.Inf(1)
		}
		var e float64
		for i, r := range lab.Runs {
			e += sq((s.Runs[i].ReadWaitMs.P95 - r.ReadWaitMs.P95) / r.ReadWaitMs.P95)
			if r.WriteMBs > 0 {
				e += sq((s.Runs[i].WriteMBs - r.WriteMBs) / r.WriteMBs)
			}
		}
		return e
	}
	type knob struct {
		name string
		get  func(*Params) float64
		set  func(*Params, float64)
	}
	knobs := []knob{
		{"write_cost", func(q *Params) float64 { return q.WriteCost }, func(q *Params, v float64) { q.WriteCost = v }},
		{"device_latency_ms", func(q *Params) float64 { return ms(q.DeviceLatency) }, func(q *Params, v float64) { q.DeviceLatency = time.Duration(v * 1e6) }},
		{"write_net_mb_s", func(q *Params) float64 { return q.WriteNetBps / 1e6 }, func(q *Params, v float64) { q.WriteNetBps = v * 1e6 }},
	}
	best := cost(p)
	for _, f := range []float64{1.5, 1.2, 1.07} {
		for improved := true; improved; {
			improved = false
			for _, k := range knobs {
				for _, m := range []float64{f, 1 / f} {
					q := p
					k.set(&q, k.get(&q)*m)
					if v := cost(q); v < best {
						best, p, improved = v, q, true
					}
				}
			}
		}
	}
	c.Method = append(c.Method, fmt.Sprintf("disk/stack: write_cost %.2f, device_latency %.2f ms, write wire %.0f MB/s by coordinate descent over %d simulated interference runs (scale 0.5, seed %d)",
		p.WriteCost, ms(p.DeviceLatency), p.WriteNetBps/1e6, c.Evaluations, seed))
	return p
}

// compareInterference compares the fitted model's interference run, at
// full scale, with the lab's.
func (c *Calibration) compareInterference(lab report.InterferenceSummary, p Params, seed uint64) error {
	s, err := simInterference(p, seed, 1)
	if err != nil {
		return err
	}
	var sum float64
	for i, r := range lab.Runs {
		cp := cmp(fmt.Sprintf("%d writers", r.Writers), r.ReadWaitMs.P95, s.Runs[i].ReadWaitMs.P95, r.WriteMBs, s.Runs[i].WriteMBs)
		c.Interference = append(c.Interference, cp)
		sum += math.Abs(cp.ErrPct)
	}
	c.InterferenceErrPct = report.Round(sum/float64(len(lab.Runs)), 1)
	return nil
}

// comparePID compares the fitted model's pid run with the lab's.
func (c *Calibration) comparePID(pid *report.ControlledSummary, p Params, seed uint64) error {
	// The lab runs pid at its default scale 0.25 (25 s on-periods
	// become 6.25 s); compare like with like.
	o := DefaultOptions()
	o.Params, o.Seed, o.Scale = p, seed, 0.25
	for _, r := range pid.Regulated {
		o.Thresholds = append(o.Thresholds, time.Duration(r.ThresholdMs*1e6))
	}
	v, err := runControlled(o, pidExperiment)
	if err != nil {
		return err
	}
	ps := v.(report.ControlledSummary)
	c.PID = append(c.PID, cmp("baseline", pid.Baseline.ReadWaitMs.P95, ps.Baseline.ReadWaitMs.P95, pid.Baseline.WriteMBs, ps.Baseline.WriteMBs))
	var sum float64
	for i, r := range pid.Regulated {
		cp := cmp(fmt.Sprintf("threshold %v ms", r.ThresholdMs), r.ReadWaitMs.P95, ps.Regulated[i].ReadWaitMs.P95, r.WriteMBs, ps.Regulated[i].WriteMBs)
		c.PID = append(c.PID, cp)
		sum += math.Abs(cp.ErrPct)
	}
	c.PIDErrPct = report.Round(sum/float64(len(pid.Regulated)), 1)
	return nil
}

func simInterference(p Params, seed uint64, scale float64) (report.InterferenceSummary, error) {
	o := DefaultOptions()
	o.Params, o.Seed, o.Scale = p, seed, scale
	v, err := runInterference(o)
	if err != nil {
		return report.InterferenceSummary{}, err
	}
	return v.(report.InterferenceSummary), nil
}

func sq(x float64) float64       { return x * x }
func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// LoadParams reads model parameters (a calibration's params.json).
func LoadParams(path string) (Params, error) {
	p := DefaultParams()
	b, err := os.ReadFile(path)
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}
