package experiments

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/sample"
)

// weighted: Three writers weighted 4:2:1 plus the small reader.
func init() {
	register(&Experiment{Name: "weighted", DefaultScale: 1,
		Title: "Three writers weighted 4:2:1 plus the small reader: agent off vs the weighted policy at max_delay 20 and 50 ms", Run: runWeightedLab})
}

// WeightedHosts are the weighted experiment's consumers and weights: the
// small reader on b2 (weight 1; its wait drives the controller) and three
// sequential writers 4:2:1.
var WeightedHosts = []struct {
	Host   string
	Weight float64
}{{"b2", 1}, {"b3", 4}, {"b4", 2}, {"b5", 1}}

// weightedWriterThreads is each writer's threads (12 in all, the thesis'
// heavy load).
const weightedWriterThreads = 4

// WeightedShare is one consumer's share in one run.
type WeightedShare struct {
	Host   string  `json:"host"`
	Weight float64 `json:"weight"`
	MBs    float64 `json:"mb_s"`
	// Share is its fraction of all consumers' bytes; TargetShare its
	// weight's fraction (what the policy aims at under saturation).
	Share       float64 `json:"share"`
	TargetShare float64 `json:"target_share"`
	// DeviationPct is eq. (1) on the share: (share − target)/target × 100.
	DeviationPct float64 `json:"deviation_pct"`
	// WriterShare and WriterTarget are the same among the writers only.
	WriterShare  float64 `json:"writer_share,omitempty"`
	WriterTarget float64 `json:"writer_target,omitempty"`
	// MeanDelayMs is the delay the agent applied to it (its status polls).
	MeanDelayMs float64 `json:"mean_delay_ms"`
}

// WeightedRun is one run of weighted.
type WeightedRun struct {
	Name       string          `json:"name"`
	Policy     string          `json:"policy"`
	MaxDelayMs float64         `json:"max_delay_ms,omitempty"`
	Shares     []WeightedShare `json:"shares"`
	TotalMBs   float64         `json:"total_mb_s"`
	ReadWaitMs report.Dist     `json:"read_wait_ms"`
	// AtMaxDelayPct is the share of polls in which the lightest writer's
	// delay was at max_delay: the ceiling, not the policy, limits it.
	AtMaxDelayPct float64         `json:"at_max_delay_pct"`
	TCP           lab.TCPCounters `json:"tcp"`
}

// WeightedSummary is summary.json of weighted.
type WeightedSummary struct {
	Experiment  string        `json:"experiment"`
	Scale       float64       `json:"scale"`
	ThresholdMs float64       `json:"threshold_ms"`
	Runs        []WeightedRun `json:"runs"`
	runTCP
}

func bytesRate(iv sample.Interval) float64 { return iv.ReadBps + iv.WriteBps }

// SummarizeWeightedRun computes a run's shares from its trace window and
// the agent's polls (none with the agent off).
func SummarizeWeightedRun(name, policy string, maxDelay time.Duration, res *lab.PhaseResult, polls []StatusSample) WeightedRun {
	run := WeightedRun{Name: name, Policy: policy, MaxDelayMs: ms(maxDelay), TCP: res.TCP}
	w := res.Window()
	var total, wsum, wtotal, wwsum float64
	rate := map[string]float64{}
	for i, h := range WeightedHosts {
		rate[h.Host] = report.Aggregate(w, []string{h.Host}, bytesRate)
		total += rate[h.Host]
		wsum += h.Weight
		if i > 0 {
			wtotal += rate[h.Host]
			wwsum += h.Weight
		}
	}
	last := WeightedHosts[len(WeightedHosts)-1].Host
	polls = inWindow(polls, res)
	var atMax int
	for _, p := range polls {
		if maxDelay > 0 && p.WriteDelayMs[lab.HostAddr(last).String()] >= ms(maxDelay) {
			atMax++
		}
	}
	if len(polls) > 0 {
		run.AtMaxDelayPct = report.Round(100*float64(atMax)/float64(len(polls)), 1)
	}
	for i, h := range WeightedHosts {
		s := WeightedShare{Host: h.Host, Weight: h.Weight, MBs: report.Round(rate[h.Host]/1e6, 3),
			TargetShare: report.Round(h.Weight/wsum, 3)}
		if total > 0 {
			s.Share = report.Round(rate[h.Host]/total, 3)
			s.DeviationPct = report.Round((rate[h.Host]/total-h.Weight/wsum)/(h.Weight/wsum)*100, 1)
		}
		if i > 0 && wtotal > 0 {
			s.WriterShare, s.WriterTarget = report.Round(rate[h.Host]/wtotal, 3), report.Round(h.Weight/wwsum, 3)
		}
		var d float64
		for _, p := range polls {
			d += p.WriteDelayMs[lab.HostAddr(h.Host).String()] + p.ReadDelayMs[lab.HostAddr(h.Host).String()]
		}
		if len(polls) > 0 {
			s.MeanDelayMs = report.Round(d/float64(len(polls)), 2)
		}
		run.Shares = append(run.Shares, s)
	}
	run.TotalMBs = report.Round(total/1e6, 2)
	run.ReadWaitMs = report.RoundDist(report.Describe(report.Values(w, "b2", readWait)))
	return run
}

func runWeightedLab(r *runner) (any, error) {
	sc := r.Scale
	lead, length := sc(10*time.Second), sc(60*time.Second)
	sum := WeightedSummary{Experiment: "weighted", Scale: r.opts.Scale, ThresholdMs: 15}
	var all []*lab.PhaseResult
	for _, run := range []struct {
		name     string
		maxDelay time.Duration
	}{{"agent-off", 0}, {"weighted-20ms", 20 * time.Millisecond}, {"weighted-50ms", 50 * time.Millisecond}} {
		p := &lab.Phase{Name: run.name, Label: run.name, Length: length, From: lead, To: length - sc(time.Second)}
		p.Jobs = []lab.Job{r.reader(length)}
		for _, h := range WeightedHosts[1:] {
			p.Jobs = append(p.Jobs, r.writer(h.Host, weightedWriterThreads, length))
		}
		var a *lab.LabAgent
		policy := "none"
		if run.maxDelay > 0 {
			policy = "weighted"
			var b strings.Builder
			fmt.Fprintf(&b, "backend: delayline\nhttp: 127.0.0.1:9311\nthreshold: 15ms\nmax_delay: %v\ndiscovery:\n  source: tgt\n  tgt_control_port: %d\nresources:\n  - name: %s\n    policy: weighted\n    weights:\n",
				run.maxDelay, lab.TgtdPort, r.Res.Name)
			for _, h := range WeightedHosts {
				fmt.Fprintf(&b, "      %s: %v\n", lab.HostAddr(h.Host), h.Weight)
			}
			var err error
			if a, err = r.startConfigured("agent-"+run.name+".yaml", b.String(), fmt.Sprintf("w%d", run.maxDelay.Milliseconds())); err != nil {
				return nil, err
			}
		}
		res, polls, err := r.runPolled(p, a, length)
		if err != nil {
			return nil, err
		}
		all = append(all, res)
		wr := SummarizeWeightedRun(run.name, policy, run.maxDelay, res, polls)
		sum.Runs = append(sum.Runs, wr)
		name := "shares-" + run.name + ".png"
		if err := plotShares(filepath.Join(r.Dir, name), res, wr); err != nil {
			return sum, err
		}
	}
	sum.runTCP = tcpOf(all)
	return sum, nil
}

// plotShares draws each writer's share of the writers' bytes per second
// against its weighted target.
func plotShares(path string, res *lab.PhaseResult, run WeightedRun) error {
	var series []report.Series
	var refs []report.Line
	writers := []string{}
	for _, h := range WeightedHosts[1:] {
		writers = append(writers, h.Host)
	}
	for _, s := range run.Shares[1:] {
		var x, y []float64
		// One-second bins: 100 ms shares of 64 KiB writers are mostly noise.
		for from := 0.0; from < res.Phase.Length.Seconds(); from++ {
			ticks := res.Between(time.Duration(from*float64(time.Second)), time.Duration((from+1)*float64(time.Second)))
			all := report.Aggregate(ticks, writers, bytesRate) * float64(len(ticks))
			mine := report.Aggregate(ticks, []string{s.Host}, bytesRate) * float64(len(ticks))
			if len(ticks) == 0 || all == 0 {
				continue
			}
			x, y = append(x, from+1), append(y, mine/all)
		}
		series = append(series, report.Series{Name: fmt.Sprintf("%s (weight %v)", s.Host, s.Weight), X: x, Y: y})
		refs = append(refs, report.Line{Name: fmt.Sprintf("%s target %.3f", s.Host, s.WriterTarget), Y: s.WriterTarget})
	}
	return report.TimePlot(path, fmt.Sprintf("weighted (%s): each writer's share of the writers' bytes vs its target", run.Name),
		"time (s)", "share (1 s bins)", series, refs)
}
