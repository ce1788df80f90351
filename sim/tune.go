package sim

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/sanqos/sanqos/report"
)

// TuneOptions choose the search.
type TuneOptions struct {
	Threshold time.Duration
	Params    Params
	Seed      uint64
	Scale     float64 // of the pid workload's durations
	Alpha     float64 // indicator EWMA α (the agent's ewma_alpha)
	Kp        []float64
	Ti        []time.Duration
	// MinKept is the least share of the baseline's write throughput a
	// candidate must keep (0..1).
	MinKept float64
}

// DefaultTune searches the gains around the lab's defaults on the
// calibrated model at the pid experiment's 15 ms.
func DefaultTune() TuneOptions {
	return TuneOptions{Threshold: 15 * time.Millisecond, Params: DefaultParams(), Seed: 1, Scale: 0.5, Alpha: 0.5,
		Kp: []float64{0.1, 0.2, 0.4, 0.8, 1.2, 1.6, 2.4, 3.2},
		Ti: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
			800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond}, MinKept: 0.5}
}

// Candidate is one gain pair's simulated step response.
type Candidate struct {
	Kp float64       `json:"kp"`
	Ti time.Duration `json:"ti_ns"`
	// OvershootPct is how far the p95 read wait lies above the threshold
	// (negative: below), SettleS the mean time after each writer on-step
	// until the smoothed wait stays under 1.2 × threshold, AbovePct the
	// share of intervals above 1.2 × threshold, KeptPct the writers'
	// throughput as a share of the unregulated baseline.
	OvershootPct float64 `json:"overshoot_pct"`
	SettleS      float64 `json:"settle_s"`
	AbovePct     float64 `json:"pct_above_1_2x"`
	KeptPct      float64 `json:"writes_kept_pct"`
	Score        float64 `json:"score"`
}

// TuneResult is the search's outcome, best first.
type TuneResult struct {
	Method     string      `json:"method"`
	Threshold  float64     `json:"threshold_ms"`
	BaselineMB float64     `json:"baseline_write_mb_s"`
	Best       Candidate   `json:"best"`
	Ranked     []Candidate `json:"ranked"`
}

// TuneMethod documents the search.
const TuneMethod = `grid search over Kp × Ti (Td = 0: the indicator is too noisy to differentiate) on the calibrated model, ` +
	`each candidate running the pid workload (reader + 12 writers toggled on/off six times) through the real agent; ` +
	`score = p95 overshoot above the threshold (%, ≥ 0) + 10 × mean settling time (s) + share of intervals above 1.2 × threshold (%), ` +
	`among candidates keeping at least MinKept of the baseline's write throughput; ties go to more throughput kept`

// Tune runs the search.
func Tune(to TuneOptions) (*TuneResult, error) {
	o := DefaultOptions()
	o.Params, o.Seed, o.Scale = to.Params, to.Seed, to.Scale
	onS := o.scale(25 * time.Second).Seconds()
	base, steps, err := controlledPhase(o, 0, false, twelveWriters)
	if err != nil {
		return nil, err
	}
	br, err := RunPhase(base, o.Params, o.Seed)
	if err != nil {
		return nil, err
	}
	baseMB := ControlledRunOf(br, 0, steps, onS).WriteMBs
	res := &TuneResult{Method: TuneMethod, Threshold: ms(to.Threshold), BaselineMB: baseMB}
	for _, kp := range to.Kp {
		for _, ti := range to.Ti {
			o.AgentYAML = fmt.Sprintf("ewma_alpha: %v\npid:\n  kp: %v\n  ti: %v\n  td: 0s\n", to.Alpha, kp, ti)
			p, _, err := controlledPhase(o, to.Threshold, false, twelveWriters)
			if err != nil {
				return nil, err
			}
			r, err := RunPhase(p, o.Params, o.Seed+1)
			if err != nil {
				return nil, err
			}
			run := ControlledRunOf(r, to.Threshold, steps, onS)
			c := Candidate{Kp: kp, Ti: ti, SettleS: run.SettleS, AbovePct: run.PctAbove}
			c.OvershootPct = report.Round(100*(run.ReadWaitMs.P95/ms(to.Threshold)-1), 1)
			if baseMB > 0 {
				c.KeptPct = report.Round(100*run.WriteMBs/baseMB, 1)
			}
			c.Score = report.Round(math.Max(0, c.OvershootPct)+10*c.SettleS+c.AbovePct, 2)
			if c.KeptPct < 100*to.MinKept {
				c.Score = math.Inf(1)
			}
			res.Ranked = append(res.Ranked, c)
		}
	}
	sort.SliceStable(res.Ranked, func(i, k int) bool {
		a, b := res.Ranked[i], res.Ranked[k]
		if a.Score != b.Score {
			return a.Score < b.Score
		}
		return a.KeptPct > b.KeptPct
	})
	if len(res.Ranked) == 0 || math.IsInf(res.Ranked[0].Score, 1) {
		return nil, fmt.Errorf("no candidate keeps %.0f%% of the baseline's writes", 100*to.MinKept)
	}
	for i := range res.Ranked {
		if math.IsInf(res.Ranked[i].Score, 1) {
			res.Ranked[i].Score = -1 // JSON has no infinity: -1 marks "fails the throughput floor"
		}
	}
	res.Best = res.Ranked[0]
	return res, nil
}

// YAML is the config snippet for the chosen gains.
func (c Candidate) YAML(alpha float64) string {
	return fmt.Sprintf("ewma_alpha: %v\npid:\n  kp: %v\n  ti: %v\n  td: 0s\n", alpha, c.Kp, c.Ti)
}
