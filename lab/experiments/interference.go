package experiments

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// interference: a rate-limited random reader vs 0/1/3/12 sequential
// writers (thesis Fig 5.7).
func init() {
	register(&Experiment{Name: "interference", Title: "A rate-limited random reader vs 0/1/3/12 sequential writers (thesis Fig 5.7)", DefaultScale: 0.25, Run: runInterference, Plots: []report.SummaryPlot{report.WaitVsWritersPlot}})
}

// InterferenceRun and InterferenceSummary are interference's summary.json
// (in report, shared with the simulator).
type (
	InterferenceRun     = report.InterferenceRun
	InterferenceSummary = report.InterferenceSummary
)

// InterferenceWriters are the thesis' interference levels.
var InterferenceWriters = []int{0, 1, 3, 12}

func runInterference(r *runner) (any, error) {
	lead, wrun, tail := r.Scale(60*time.Second), r.Scale(65*time.Second), r.Scale(20*time.Second)
	var phases []*lab.Phase
	for _, n := range InterferenceWriters {
		p := &lab.Phase{Name: fmt.Sprintf("writers-%d", n), Label: fmt.Sprintf("%d writers", n), Params: map[string]string{"writers": fmt.Sprint(n)},
			Length: lead + wrun + tail, From: lead, To: lead + wrun}
		p.Jobs = append([]lab.Job{r.reader(lead + wrun + tail)}, r.writers(n, lead, wrun)...)
		phases = append(phases, p)
	}
	rs, err := r.RunAll(phases)
	if err != nil {
		return nil, err
	}
	sum, series := SummarizeInterference(phases, rs)
	sum.Scale = r.opts.Scale
	err = report.TimePlot(filepath.Join(r.Dir, "read-wait.png"),
		"smalljob's read wait vs interfering writers (Fig 5.7)", "time (s)", "read wait of b2's LUN (ms, EWMA 0.15)", series, nil)
	return sum, err
}

// SummarizeInterference computes summary.json (and the plot's series) from
// the phases' results, pooled over repeats; phases[i] ran with
// InterferenceWriters[i] writers.
func SummarizeInterference(phases []*lab.Phase, rs []*lab.PhaseResult) (InterferenceSummary, []report.Series) {
	s := InterferenceSummary{Experiment: "interference", TCP: sumTCP(rs)}
	s.Retrans = s.TCP.RetransSegs
	var series []report.Series
	for i, n := range InterferenceWriters {
		run := InterferenceRun{Writers: n}
		var waits, wr []float64
		var mine []*lab.PhaseResult
		for _, res := range rs {
			if res.Phase != phases[i] {
				continue
			}
			mine = append(mine, res)
			v := report.Values(res.Window(), "b2", readWait)
			waits = append(waits, v...)
			run.P95PerRepeat = append(run.P95PerRepeat, report.Round(report.Describe(v).P95, 2))
			wr = append(wr, report.Aggregate(res.Window(), lab.Hosts[1:], writeMBs))
			if res.Repeat == 0 {
				x, y := res.Series("b2", readWait)
				series = append(series, report.Series{Name: phases[i].Label, X: x, Y: report.Smooth(y)})
			}
		}
		run.ReadWaitMs, run.Initiator = report.RoundDist(report.Describe(waits)), initiator(mine...)
		m, _ := report.MeanStderr(wr)
		run.WriteMBs = report.Round(m, 2)
		s.Runs = append(s.Runs, run)
	}
	if base := s.Runs[0].ReadWaitMs.P95; base > 0 {
		s.P95Ratio12 = report.Round(s.Runs[len(s.Runs)-1].ReadWaitMs.P95/base, 2)
	}
	return s, series
}
