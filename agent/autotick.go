package agent

import (
	"log/slog"
	"math"
	"time"
)

// autoState is a resource's threshold: auto in its pipeline: the
// learner, the threshold last handed to the controller, and the log's
// rate limit.
type autoState struct {
	learner *autoThreshold
	ctrlThr time.Duration
	logged  time.Time // last change logged
	unlog   int       // changes since, not logged
}

// autoLogEvery rate-limits the log of learned thresholds: the first is
// always logged, later changes at most once a minute (with how many
// went unlogged); status and the threshold metric show every one.
const autoLogEvery = time.Minute

// threshold is what the resource is held under this tick: its spec's, or
// under threshold: auto the learner's. A change of the learned
// threshold, or a reload from auto to a set one, retargets the
// controller (retarget: from the step in force, without a bump).
func (l *Loops) threshold(rs *resourceState, spec ResourceSpec) time.Duration {
	switch {
	case spec.AutoThreshold && spec.NewControllerAt != nil && rs.auto == nil:
		rs.auto = &autoState{learner: newAutoThreshold(ms(spec.Threshold), spec.TailObjective), ctrlThr: spec.Threshold}
		l.log.Info("threshold auto: learning", slog.String("resource", spec.Name), slog.Duration("start", spec.Threshold))
	case !spec.AutoThreshold && rs.auto != nil:
		if rs.auto.ctrlThr != spec.Threshold {
			rs.ctrl = retarget(rs.ctrl, spec.NewController())
		}
		rs.auto = nil
	}
	if rs.auto == nil {
		return spec.Threshold
	}
	thr := time.Duration(math.Round(rs.auto.learner.thresholdMs() * 1e6))
	if thr != rs.auto.ctrlThr {
		rs.ctrl = retarget(rs.ctrl, spec.NewControllerAt(thr))
		rs.auto.ctrlThr = thr
	}
	return thr
}

// learn feeds this tick to the resource's learner (threshold: auto): the
// devices' throughput, the indicator's raw wait, whether the onset
// detector saw an interferer, whether the resource slowed anyone, and
// the floor; the new threshold takes
// effect next tick. It puts what was learned on the status, and logs a
// change.
func (l *Loops) learn(rs *resourceState, name string, st *ResourceStatus, d devIntervals, now time.Time) {
	a := rs.auto
	if a == nil {
		return
	}
	var bps float64
	for i, ok := range d.ok {
		if ok {
			bps += d.iv[i].ReadBps + d.iv[i].WriteBps
		}
	}
	loaded := rs.onset != nil && rs.onset.Loaded()
	f, fok := rs.floor.value()
	wasLearned := a.learner.learned
	// rs.asked is still last tick's settings: those this tick ran under.
	if a.learner.observe(bps, st.RawWaitMs, loaded, len(rs.asked) > 0, f, fok) {
		a.noteChange(l.log, name, st.ThresholdMs, !wasLearned, now)
	}
	st.Auto = a.learner.status()
}

// noteChange logs a change of the learned threshold from fromMs: the
// first learned one always, later ones at most every autoLogEvery, with
// how many changes went unlogged in between (the changes while learning
// among them: the start following the floor).
func (a *autoState) noteChange(log *slog.Logger, name string, fromMs float64, first bool, now time.Time) {
	if !a.learner.learned || !first && now.Sub(a.logged) < autoLogEvery {
		a.unlog++
		return
	}
	s := a.learner.status()
	log.Info("threshold auto: threshold changed", slog.String("resource", name),
		slog.Float64("from_ms", fromMs), slog.Float64("to_ms", a.learner.thresholdMs()),
		slog.Float64("peak_mb_s", round2(s.PeakMBs)), slog.Float64("wait_at_90pct_peak_ms", round2(s.WaitAtPeakMs)),
		slog.Float64("floor_ms", round2(s.FloorMs)), slog.Int("changes_not_logged", a.unlog))
	a.logged, a.unlog = now, 0
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }
