package experiments

// What htb-steps, delay-steps-read and delay-steps-write share: a
// throttle set stepwise on sequential readers or writers, then released.

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// The steps experiments: thesis Fig 5.2 (HTB rate classes), 5.3 and 5.4
// (packet delay: data to readers, ACKs to writers).
func init() {
	for _, e := range []struct {
		name, title, backend, direction string
		set                             throttle.Setting
	}{
		{"htb-steps", "Sequential readers throttled stepwise by HTB rate classes, then released (Fig 5.2)", "htb", "read", throttle.Setting{Rate: 3 << 20}},
		{"delay-steps-read", "Sequential readers throttled stepwise by packet delay, then released (Fig 5.3)", "delayline", "read", throttle.Setting{ReadDelay: 4600 * time.Microsecond}},
		{"delay-steps-write", "Sequential writers throttled stepwise by delayed ACKs, then released (Fig 5.4)", "delayline", "write", throttle.Setting{WriteDelay: 4600 * time.Microsecond}},
	} {
		register(&Experiment{Name: e.name, Title: e.title, DefaultScale: 0.25,
			Run: func(r *runner) (any, error) { return runSteps(r, e.backend, e.direction, e.set) }})
	}
}

// step is one throttle change of the steps experiments.
type step struct {
	At   time.Duration
	Host string
	On   bool
}

// StepSegment is the rates between two throttle changes.
type StepSegment struct {
	FromS      float64            `json:"from_s"`
	ToS        float64            `json:"to_s"`
	Throttled  []string           `json:"throttled"`
	PerHostMBs map[string]float64 `json:"per_host_mb_s"`
}

// StepsSummary is summary.json of delay-steps-* and htb-steps.
type StepsSummary struct {
	Experiment string        `json:"experiment"`
	Backend    string        `json:"backend"`
	Direction  string        `json:"direction"`
	Setting    string        `json:"setting"`
	Segments   []StepSegment `json:"segments"`
	// ThrottledVsFree is the mean rate of throttled hosts over that of the
	// unthrottled ones, across segments with both.
	ThrottledVsFree float64 `json:"throttled_vs_free_rate_ratio"`
	runTCP
}

// thesisWrites makes the agent of the thesis' throttle figures (5.4–5.6,
// 5.8) put write delays on pure ACKs, as the thesis did; the agent's
// default, the target's replies, is what pid and autonomic measure.
var thesisWrites = []string{"--write-delay-on", "acks"}

func describeSetting(s throttle.Setting) string {
	switch {
	case s.Rate > 0:
		return fmt.Sprintf("rate %.1f MB/s", float64(s.Rate)/1e6)
	case s.ReadDelay > 0:
		return "read delay " + s.ReadDelay.String()
	default:
		return "write delay " + s.WriteDelay.String()
	}
}

// runSteps is the thesis' stepwise throttling: four equal sequential jobs;
// b2, b3, b4 are throttled one after another, then released in turn.
func runSteps(r *runner, backend, dir string, set throttle.Setting) (any, error) {
	a, err := lab.StartAgent(backend, r.Dir, thesisWrites...)
	if err != nil {
		return nil, err
	}
	defer a.Stop()
	sc := r.Scale
	steps := []step{{sc(20 * time.Second), "b2", true}, {sc(40 * time.Second), "b3", true}, {sc(60 * time.Second), "b4", true},
		{sc(80 * time.Second), "b2", false}, {sc(100 * time.Second), "b3", false}, {sc(120 * time.Second), "b4", false}}
	length := sc(140 * time.Second)
	p := &lab.Phase{Name: "steps", Label: describeSetting(set), Length: length, From: 0, To: length}
	for _, h := range lab.Hosts {
		p.Jobs = append(p.Jobs, lab.Job{Name: "seq" + dir, Host: h, URL: r.LUN(h).URL, RW: dir, BS: 64 << 10, Runtime: length})
	}
	for _, s := range steps {
		p.Events = append(p.Events, lab.Event{At: s.At, Name: fmt.Sprintf("%s %v", s.Host, s.On), Do: func() error {
			if s.On {
				return a.Set(map[netip.Addr]throttle.Setting{lab.HostAddr(s.Host): set})
			}
			return a.Clear(lab.HostAddr(s.Host))
		}})
	}
	rs, err := r.RunAll([]*lab.Phase{p})
	if err != nil {
		return nil, err
	}
	res := rs[0]
	f := rateOf(dir)
	sum := StepsSummary{Experiment: "steps", Backend: backend, Direction: dir, Setting: describeSetting(set), runTCP: tcpOf(rs)}
	stepSegments(&sum, res, steps, length, f)
	var series []report.Series
	for _, h := range lab.Hosts {
		x, y := res.Series(h, f)
		series = append(series, report.Series{Name: h, X: x, Y: report.Smooth(y)})
	}
	title := fmt.Sprintf("Stepwise throttling of sequential %ss by %s (%s)", dir, backend, sum.Setting)
	err = report.TimePlot(filepath.Join(r.Dir, dir+"-rates.png"), title, "time (s)", dir+" rate (MB/s, EWMA 0.15)", series, nil)
	return sum, err
}

// stepSegments fills in sum's segments, the times between steps (each
// change's first second skipped): each host's mean rate by f and who was
// throttled; and, over the segments where some were, the throttled hosts'
// mean rate against the free ones'.
func stepSegments(sum *StepsSummary, res *lab.PhaseResult, steps []step, length time.Duration, f func(sample.Interval) float64) {
	bounds := []time.Duration{0}
	for _, s := range steps {
		bounds = append(bounds, s.At)
	}
	bounds = append(bounds, length)
	on := map[string]bool{}
	var thr, free []float64
	for i := 0; i+1 < len(bounds); i++ {
		if i > 0 {
			on[steps[i-1].Host] = steps[i-1].On
		}
		// Skip the first second after a change: the rate is in transition.
		from, to := bounds[i]+time.Second, bounds[i+1]
		seg := StepSegment{FromS: from.Seconds(), ToS: to.Seconds(), PerHostMBs: map[string]float64{}}
		for _, h := range lab.Hosts {
			if on[h] {
				seg.Throttled = append(seg.Throttled, h)
			}
			m, _ := report.MeanStderr(report.Values(res.Between(from, to), h, f))
			seg.PerHostMBs[h] = report.Round(m, 2)
			if len(seg.Throttled) > 0 && len(seg.Throttled) < len(lab.Hosts) {
				if on[h] {
					thr = append(thr, m)
				} else {
					free = append(free, m)
				}
			}
		}
		sum.Segments = append(sum.Segments, seg)
	}
	mt, _ := report.MeanStderr(thr)
	mf, _ := report.MeanStderr(free)
	if mf > 0 {
		sum.ThrottledVsFree = report.Round(mt/mf, 3)
	}
}
