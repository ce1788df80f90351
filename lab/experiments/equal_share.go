package experiments

import (
	"path/filepath"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// equalShare: four equal sequential readers share the resource (thesis
// Fig 5.1).
func init() {
	register(&Experiment{Name: "equal-share", Title: "Four equal sequential readers share the resource (thesis Fig 5.1)", DefaultScale: 0.25, Run: runEqualShare, Plots: []report.SummaryPlot{report.PerHostPlot}})
}

// EqualShareSummary is summary.json of equal-share.
type EqualShareSummary struct {
	Experiment string             `json:"experiment"`
	Scale      float64            `json:"scale"`
	PerHostMBs map[string]float64 `json:"per_host_mb_s"`
	TotalMBs   float64            `json:"total_mb_s"`
	Fairness   float64            `json:"fairness"`
	runTCP
}

func runEqualShare(r *runner) (any, error) {
	length := r.Scale(60 * time.Second)
	p := &lab.Phase{Name: "readers", Label: "4 sequential readers", Length: length + time.Second, From: 2 * time.Second, To: length - time.Second}
	for _, h := range lab.Hosts {
		p.Jobs = append(p.Jobs, lab.Job{Name: "seqread", Host: h, URL: r.LUN(h).URL, RW: "read", BS: 64 << 10, Runtime: length})
	}
	rs, err := r.RunAll([]*lab.Phase{p})
	if err != nil {
		return nil, err
	}
	s := EqualShareSummary{Experiment: "equal-share", Scale: r.opts.Scale, PerHostMBs: map[string]float64{}, runTCP: tcpOf(rs)}
	var rates []float64
	for _, h := range lab.Hosts {
		var v []float64
		for _, res := range rs {
			v = append(v, report.Aggregate(res.Window(), []string{h}, readMBs))
		}
		m, _ := report.MeanStderr(v)
		s.PerHostMBs[h] = report.Round(m, 2)
		rates = append(rates, m)
		s.TotalMBs += m
	}
	s.TotalMBs = report.Round(s.TotalMBs, 2)
	s.Fairness = report.Round(report.Jain(rates), 4)
	var series []report.Series
	for _, h := range lab.Hosts {
		x, y := rs[0].Series(h, readMBs)
		series = append(series, report.Series{Name: h, X: x, Y: report.Smooth(y)})
	}
	err = report.TimePlot(filepath.Join(r.Dir, "read-rates.png"), "Equal sequential readers share the resource (Fig 5.1)", "time (s)", "read rate (MB/s, EWMA 0.15)", series, nil)
	return s, err
}
