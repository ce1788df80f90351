package experiments

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/throttle"
)

// delaySweepFresh: Rate vs delay with a new iSCSI session per point.
func init() {
	register(&Experiment{Name: "delay-sweep-fresh", DefaultScale: 0.25, Flags: []*Flag{flagBackends},
		Title: "Rate vs delay when every point opens a new iSCSI session (shows CUBIC HyStart's early exit)", Run: func(r *runner) (any, error) { return r.eachBackend("delay-sweep-fresh", r.delaySweepFresh) }, Plots: []report.SummaryPlot{report.RateVsDelayPlot}})
}

func (r *runner) delaySweepFresh(backend string) (backendRun, error) {
	a, err := r.startAgent(backend, thesisWrites...)
	if err != nil {
		return nil, err
	}
	defer a.Stop()
	bytes := int64(float64(200e6)*r.opts.Scale) / (64 << 10) * (64 << 10)
	sum := newSweepSummary("delay-sweep-fresh", "new per point")
	sum.BytesPer = bytes
	b2 := lab.HostAddr("b2")
	var all []*lab.PhaseResult
	for _, dir := range []string{"read", "write"} {
		var xs, ys []float64
		for _, d := range SweepDelays {
			set := sweepSetting(dir, d)
			p := &lab.Phase{Name: fmt.Sprintf("%s-%.1fms", dir, float64(d)/1e6), Label: fmt.Sprintf("%s at %v", dir, d),
				Length: 5 * time.Minute, From: 0, To: 0,
				Jobs: []lab.Job{{Name: "move", Host: "b2", URL: r.LUN("b2").URL, RW: dir, BS: 64 << 10, Size: bytes}}}
			pt := SweepPoint{Direction: dir, DelayMs: float64(d) / 1e6}
			for rep := 0; rep < max(r.opts.Repeat, 3); rep++ {
				if err := a.Set(map[netip.Addr]throttle.Setting{b2: set}); err != nil {
					return nil, err
				}
				res, err := r.Run(p, rep)
				if err != nil {
					return nil, err
				}
				all = append(all, res)
				mbs, err := fioMBs(filepath.Join(r.Dir, fmt.Sprintf("%s.r%d", p.Name, rep), "b2.json"), dir)
				if err != nil {
					return nil, err
				}
				pt.Repeats = append(pt.Repeats, report.Round(mbs, 3))
				xs = append(xs, pt.DelayMs)
				ys = append(ys, mbs)
			}
			m, se := report.MeanStderr(pt.Repeats)
			pt.MBs, pt.Stderr = report.Round(m, 3), report.Round(se, 3)
			sum.Points = append(sum.Points, pt)
		}
		if err := sum.fitDirection(r.Dir, dir, xs, ys, fmt.Sprintf(", %d MB per point", bytes/1e6)); err != nil {
			return nil, err
		}
	}
	if err := a.Clear(); err != nil {
		return nil, err
	}
	sum.runTCP = tcpOf(all)
	return sum, nil
}
