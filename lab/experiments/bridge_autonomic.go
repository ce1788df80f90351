package experiments

import (
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// bridgeAutonomic: autonomic with the agent on the bridge (thesis 6.9).
func init() {
	register(&Experiment{Name: "bridge-autonomic", DefaultScale: 0.25, Flags: []*Flag{flagThresholds, flagAgentSet, flagWriters, flagCycles},
		Title: "autonomic's load with the agent on the bridge (sqlan): FORWARD throttling, passive iSCSI latency only (thesis 6.9)", Run: func(r *runner) (any, error) { return runControlled(r, "bridge-autonomic") }})
}

// BridgeCaptureInterface is the bridge port towards the target, where the
// bridge-mode agent captures.
const BridgeCaptureInterface = "p-" + lab.TargetNS

// bridgeAgentConfig writes the config of an agent in sqlan: only the
// threshold and the target's portal. It sees no diskstats and no tgtadm.
func (r *runner) bridgeAgentConfig(path string, thr time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "backend: delayline\nhttp: 127.0.0.1:9311\nthreshold: %v\nmode: bridge\ncapture_interface: %s\n%s\n", thr, BridgeCaptureInterface, r.opts.AgentYAML)
	fmt.Fprintf(&b, "resources:\n  - name: %s\n    portals: [\"%s\"]\n", r.Res.Name, fmt.Sprintf("%s:%d", lab.TargetAddr, lab.ISCSIPort))
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// BridgeSummary is bridge-autonomic's summary.json: autonomic's, plus how
// well the passive signal tracked the target's diskstats.
type BridgeSummary struct {
	ControlledSummary
	Passive []PassiveTracking `json:"passive"`
}

// PassiveTracking compares, for one regulated run, the agent's per-interval
// passive read wait (its status' raw_wait_ms, sampled every 100 ms) with
// the reader's LUN read wait from diskstats in bm over the same tick, in
// the writers' window.
type PassiveTracking struct {
	ThresholdMs float64 `json:"threshold_ms"`
	Samples     int     `json:"samples"`
	// Per 100 ms: mean |passive − diskstats| and mean (passive − diskstats).
	MeanAbsErrorMs float64 `json:"mean_abs_error_ms"`
	MeanErrorMs    float64 `json:"mean_error_ms"`
	// The same over 1 s means, and their correlation.
	MeanAbsError1sMs float64 `json:"mean_abs_error_1s_ms"`
	Correlation1s    float64 `json:"correlation_1s"`
	PassiveMeanMs    float64 `json:"passive_mean_ms"`
	DiskstatsMeanMs  float64 `json:"diskstats_mean_ms"`
}

// passiveSeries records the agent's passive read wait during a phase.
type passiveSeries struct {
	x, y []float64
}

type statusDoc struct {
	Resources []struct {
		RawWaitMs *float64 `json:"raw_wait_ms"`
	} `json:"resources"`
}

func (ps *passiveSeries) events(a *lab.LabAgent, length time.Duration) []lab.Event {
	var ev []lab.Event
	for t := 100 * time.Millisecond; t < length; t += 100 * time.Millisecond {
		ev = append(ev, lab.Event{At: t, Name: "sample passive wait", Do: func() error {
			var st statusDoc
			if err := a.Status(&st); err != nil {
				return err
			}
			v := math.NaN()
			if len(st.Resources) > 0 && st.Resources[0].RawWaitMs != nil {
				v = *st.Resources[0].RawWaitMs
			}
			ps.x, ps.y = append(ps.x, t.Seconds()), append(ps.y, v)
			return nil
		}})
	}
	return ev
}

// pairs returns (passive, diskstats) at each sample in the window with
// both defined, matching a sample to the tick nearest its time.
func (ps *passiveSeries) pairs(res *lab.PhaseResult) (t, p, d []float64) {
	dx, dy := res.Series("b2", readWait)
	k := 0
	for i, x := range ps.x {
		if x <= res.Phase.From.Seconds() || x > res.Phase.To.Seconds() || math.IsNaN(ps.y[i]) {
			continue
		}
		for k+1 < len(dx) && math.Abs(dx[k+1]-x) < math.Abs(dx[k]-x) {
			k++
		}
		if k >= len(dx) || math.Abs(dx[k]-x) > 0.06 || math.IsNaN(dy[k]) {
			continue
		}
		t, p, d = append(t, x), append(p, ps.y[i]), append(d, dy[k])
	}
	return t, p, d
}

func (ps *passiveSeries) track(res *lab.PhaseResult, thr time.Duration) PassiveTracking {
	tr := PassiveTracking{ThresholdMs: float64(thr) / 1e6}
	t, p, d := ps.pairs(res)
	tr.Samples = len(p)
	if len(p) == 0 {
		return tr
	}
	var abs, sgn float64
	for i := range p {
		abs += math.Abs(p[i] - d[i])
		sgn += p[i] - d[i]
	}
	n := float64(len(p))
	tr.MeanAbsErrorMs, tr.MeanErrorMs = report.Round(abs/n, 2), report.Round(sgn/n, 2)
	tr.PassiveMeanMs, tr.DiskstatsMeanMs = report.Round(stat.Mean(p, nil), 2), report.Round(stat.Mean(d, nil), 2)
	// 1 s means.
	type acc struct{ p, d, n float64 }
	secs := map[int]*acc{}
	for i := range p {
		s := int(t[i])
		if secs[s] == nil {
			secs[s] = &acc{}
		}
		secs[s].p += p[i]
		secs[s].d += d[i]
		secs[s].n++
	}
	var ps1, ds1 []float64
	var abs1 float64
	for _, a := range secs {
		ps1, ds1 = append(ps1, a.p/a.n), append(ds1, a.d/a.n)
		abs1 += math.Abs(a.p/a.n - a.d/a.n)
	}
	tr.MeanAbsError1sMs = report.Round(abs1/float64(len(ps1)), 2)
	if len(ps1) > 2 {
		tr.Correlation1s = report.Round(stat.Correlation(ps1, ds1, nil), 3)
	}
	return tr
}

// plot is the passive series against diskstats over the whole phase.
func (ps *passiveSeries) plot(res *lab.PhaseResult, thr time.Duration) []report.Series {
	var px, py []float64
	for i, x := range ps.x {
		if !math.IsNaN(ps.y[i]) {
			px, py = append(px, x), append(py, ps.y[i])
		}
	}
	dx, dy := res.Series("b2", readWait)
	return []report.Series{
		{Name: fmt.Sprintf("passive (agent, threshold %v)", thr), X: px, Y: report.Smooth(py)},
		{Name: "diskstats in bm (reader's LUN)", X: dx, Y: report.Smooth(dy)},
	}
}
