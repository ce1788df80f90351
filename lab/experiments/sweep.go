package experiments

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/throttle"
)

// What delay-sweep and delay-sweep-fresh share: the sweep's points, its
// summary and the fit of rate against delay.

// SweepPoint is one (direction, delay) of delay-sweep.
type SweepPoint struct {
	Direction string    `json:"direction"`
	DelayMs   float64   `json:"delay_ms"`
	MBs       float64   `json:"mb_s"`
	Stderr    float64   `json:"stderr"`
	Repeats   []float64 `json:"repeats"`
	// TCP counts the target's and b2's TCP events during this point's
	// steps, each from the change into it (delay-sweep only): it tells a
	// probe the delay caused from one the lab makes unthrottled. By sender:
	// the target (the reads' data) and b2 (the writes' data, whose ACKs a
	// write delay holds). With the kernel initiator b2's side is the
	// initial namespace's stack, every client's session (b3..b5's idle).
	TCP          *lab.TCPCounters `json:"tcp,omitempty"`
	TCPTarget    *lab.TCPCounters `json:"tcp_target,omitempty"`
	TCPInitiator *lab.TCPCounters `json:"tcp_initiator,omitempty"`
}

// SweepSummary is summary.json of delay-sweep.
type SweepSummary struct {
	Experiment string `json:"experiment"`
	backendFields
	Session string `json:"session"`
	// Streams is the swept host's concurrent streams (delay-sweep
	// --streams); with more than one the criterion is monotony.
	Streams  int          `json:"streams,omitempty"`
	BytesPer int64        `json:"bytes_per_point"`
	Points   []SweepPoint `json:"points"`
	// Criterion is the pass test: the thesis' own measure (Fig 5.5/5.6),
	// the time to move 200 MB against the delay, is linear.
	Criterion SweepCriterion `json:"criterion"`
	// R2 is the linear fit of rate vs delay, kept as information. R2Time
	// fits the time to move 200 MB vs delay, which is what thesis Fig
	// 5.5/5.6 plot: with one I/O in flight, each I/O pays the delay once, so
	// time is linear in the delay and rate is its reciprocal (a hyperbola).
	R2     map[string]float64 `json:"r2"`
	R2Time map[string]float64 `json:"r2_time_per_200mb"`
	// RatioAtMax is the rate at the largest delay over the rate at zero.
	RatioAtMax map[string]float64 `json:"ratio_max_delay_vs_0"`
	runTCP
	// LeadTCP is the target's and b2's count over each direction's
	// undelayed lead (first seconds, with libiscsi its login too;
	// delay-sweep only): what the lab does unthrottled, beside the
	// points' own counts.
	LeadTCP lab.TCPCounters `json:"tcp_unthrottled_lead"`
}

// SweepCriterion says, per direction, whether the sweep passed.
type SweepCriterion struct {
	Measure string  `json:"measure"`
	MinR2   float64 `json:"min_r2"`
	// SecondsPerMs is the fit's slope: what each ms of delay adds to the
	// time for 200 MB.
	SecondsPerMs map[string]float64 `json:"seconds_per_ms"`
	Pass         map[string]bool    `json:"pass"`
	// KneeMs is, with many streams, the smallest delay whose rate is
	// below 90 % of the undelayed rate (0: none in the sweep): below it
	// the delay only moves the streams' queue from the disk onto the wire.
	KneeMs map[string]float64 `json:"knee_ms,omitempty"`
}

// SweepMinR2Time is the criterion's bound on the time fit's R². Measured
// here 0.957–0.9985 over this lab's runs; the thesis' own figures are
// straight lines to the eye. Below it the throttle would not act as one
// delay per I/O, which is what makes a delay step a predictable control
// step.
const SweepMinR2Time = 0.95

// SweepManyDelays are the delays swept with many streams: N streams keep
// a disk busy until the delay nears N service times (twelve 64 KiB
// streams on the lab's disk: ~27 ms, docs/interferers.md), so the
// thesis' 0–9.6 ms would show only the flat part.
var SweepManyDelays = []time.Duration{0, time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	15 * time.Millisecond, 20 * time.Millisecond, 25 * time.Millisecond, 30 * time.Millisecond, 40 * time.Millisecond}

// sweepDelays is the sweep for a number of streams.
func sweepDelays(streams int) []time.Duration {
	if streams > 1 {
		return SweepManyDelays
	}
	return SweepDelays
}

// SweepDelays are the thesis' delays: 0, then 0.6 to 9.6 ms in 1 ms steps.
var SweepDelays = []time.Duration{0, 600 * time.Microsecond, 1600 * time.Microsecond, 2600 * time.Microsecond, 3600 * time.Microsecond,
	4600 * time.Microsecond, 5600 * time.Microsecond, 6600 * time.Microsecond, 7600 * time.Microsecond, 8600 * time.Microsecond, 9600 * time.Microsecond}

// newSweepSummary is an empty summary of the named sweep, its maps made.
func newSweepSummary(experiment, session string) *SweepSummary {
	return &SweepSummary{Experiment: experiment, Session: session,
		R2: map[string]float64{}, R2Time: map[string]float64{}, RatioAtMax: map[string]float64{}}
}

// sweepSetting is delay d on the swept direction only.
func sweepSetting(direction string, d time.Duration) throttle.Setting {
	if direction == "write" {
		return throttle.Setting{WriteDelay: d}
	}
	return throttle.Setting{ReadDelay: d}
}

// fitDirection judges one direction once its points are in s, given each
// repeat's (delay ms, MB/s) in xs, ys: the rate fit (R2), the time fit
// (fitTime), the rate at the largest delay over the rate at zero, and the
// rate and time plots in dir. how goes after "(ms)" in the rate plot's
// title.
func (s *SweepSummary) fitDirection(dir, direction string, xs, ys []float64, how string) error {
	_, _, r2 := report.LinearFit(xs, ys)
	s.R2[direction] = report.Round(r2, 4)
	if s.Streams > 1 {
		s.judgeMonotonic(direction)
	} else {
		s.fitTime(direction, xs, ys)
	}
	var first, last float64
	var bars []report.Bar
	for _, pt := range s.Points {
		if pt.Direction != direction {
			continue
		}
		if pt.DelayMs == 0 {
			first = pt.MBs
		}
		last = pt.MBs
		bars = append(bars, report.Bar{Label: fmt.Sprintf("%.1f", pt.DelayMs), Value: pt.MBs, Err: pt.Stderr})
	}
	if first > 0 {
		s.RatioAtMax[direction] = report.Round(last/first, 3)
	}
	if err := report.BarPlot(filepath.Join(dir, direction+"-sweep.png"),
		fmt.Sprintf("%s rate vs added delay (ms)%s, R²=%.3f", direction, how, r2), direction+" MB/s", bars); err != nil {
		return err
	}
	return timePlot(dir, direction, s.Points, s.R2Time[direction])
}

// pointTCP sums the counts of delay i's steps, given the counters at each
// of the n·reps changes and at the end; nil if an event did not run.
func pointTCP(marks []lab.TCPCounters, n, reps, i int) *lab.TCPCounters {
	if len(marks) != n*reps+1 {
		return nil
	}
	var c lab.TCPCounters
	for rep := 0; rep < reps; rep++ {
		k := rep*n + i
		c = c.Add(marks[k+1].Sub(marks[k]))
	}
	return &c
}

// readTCP reads the counters of the swept session's two ends. An error
// ends the sweep: a zero reading would turn the next difference into a
// wrapped uint64, not a count.
func (pl sweepPlan) readTCP() (target, initiator lab.TCPCounters, err error) {
	if target, err = lab.ReadTCPCounters(pl.targetNS); err != nil {
		return target, initiator, err
	}
	initiator, err = lab.ReadTCPCounters(pl.initiatorNS)
	return target, initiator, err
}

// timePlot draws what thesis Figs 5.5/5.6 draw: the time to move 200 MB
// per added delay, mean and standard error of the repeats.
func timePlot(dir, direction string, points []SweepPoint, r2 float64) error {
	var bars []report.Bar
	for _, pt := range points {
		if pt.Direction != direction {
			continue
		}
		var ts []float64
		for _, v := range pt.Repeats {
			if v > 0 {
				ts = append(ts, 200/v)
			}
		}
		m, se := report.MeanStderr(ts)
		bars = append(bars, report.Bar{Label: fmt.Sprintf("%.1f", pt.DelayMs), Value: m, Err: se})
	}
	return report.BarPlot(filepath.Join(dir, direction+"-time-per-200mb.png"),
		fmt.Sprintf("Time to %s 200 MB vs added delay (ms), R²=%.3f (thesis Fig %s)", direction, r2, map[string]string{"read": "5.5", "write": "5.6"}[direction]),
		"seconds", bars)
}

// fitTime fits seconds per 200 MB against delay for one direction, the
// thesis' measure, and judges it: R2Time and the criterion.
func (s *SweepSummary) fitTime(dir string, delays, mbs []float64) {
	var t []float64
	for _, v := range mbs {
		t = append(t, 200/v)
	}
	_, slope, r2 := report.LinearFit(delays, t)
	s.R2Time[dir] = report.Round(r2, 4)
	c := &s.Criterion
	if c.Pass == nil {
		*c = SweepCriterion{Measure: "seconds to move 200 MB vs added delay, linear fit (thesis Fig 5.5/5.6)", MinR2: SweepMinR2Time,
			SecondsPerMs: map[string]float64{}, Pass: map[string]bool{}}
	}
	c.SecondsPerMs[dir] = report.Round(slope, 3)
	c.Pass[dir] = r2 >= SweepMinR2Time && slope > 0
}

// SweepMonotonicSlack is how far a point's rate may rise above the
// lowest rate at any smaller delay before the many-stream sweep fails:
// repeats of one point differ by a few percent on this lab's disk model.
const SweepMonotonicSlack = 0.05

// judgeMonotonic judges a many-stream direction: the rate may stay flat
// while the delay only moves queue onto the wire, but must never rise
// with the delay (beyond SweepMonotonicSlack or two standard errors), so
// that a larger delay is never a smaller step; and it records the knee.
// With one I/O in flight per stream and N streams, the time to move
// 200 MB is not linear in the delay below the knee, so the thesis'
// single-stream fit does not apply.
func (s *SweepSummary) judgeMonotonic(dir string) {
	c := &s.Criterion
	if c.Pass == nil {
		*c = SweepCriterion{Measure: "many streams: rate never rises with the added delay (5 % or two standard errors of slack); knee = first delay under 90 % of the undelayed rate",
			SecondsPerMs: map[string]float64{}, Pass: map[string]bool{}, KneeMs: map[string]float64{}}
	}
	pass, low, first := true, 0.0, 0.0
	c.KneeMs[dir] = 0
	for _, pt := range s.Points {
		if pt.Direction != dir {
			continue
		}
		if pt.DelayMs == 0 {
			first, low = pt.MBs, pt.MBs
			continue
		}
		if pt.MBs > low*(1+SweepMonotonicSlack)+2*pt.Stderr {
			pass = false
		}
		low = min(low, pt.MBs)
		if c.KneeMs[dir] == 0 && first > 0 && pt.MBs < 0.9*first {
			c.KneeMs[dir] = pt.DelayMs
		}
	}
	c.Pass[dir] = pass && first > 0
}

// fioMBs reads a job's bandwidth from fio's JSON output.
func fioMBs(path, dir string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var out struct {
		Jobs []struct {
			Read struct {
				BwBytes float64 `json:"bw_bytes"`
			} `json:"read"`
			Write struct {
				BwBytes float64 `json:"bw_bytes"`
			} `json:"write"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	var sum float64
	for _, j := range out.Jobs {
		if dir == "read" {
			sum += j.Read.BwBytes
		} else {
			sum += j.Write.BwBytes
		}
	}
	return sum / 1e6, nil
}
