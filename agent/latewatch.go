package agent

import (
	"context"
	"time"

	"github.com/sanqos/sanqos/throttle"
)

// The delay line's lateness adds to every delay it applies, and a release
// late by more than a sender's probe margin (2 ms over 2·srtt) can draw a
// spurious tail-loss probe. An operator without Prometheus should still
// hear of it, once a window and not per packet.
const (
	lateWindow    = time.Minute
	lateBound     = 2 * time.Millisecond // one of throttle.LateBounds
	lateWarnShare = 0.01                 // of a window's releases
	lateMinCount  = 100                  // releases before a share means anything
)

// lateWatch compares successive lateness totals of the delay line.
type lateWatch struct {
	last   throttle.Lateness
	warned bool
}

// lateVerdict is one window's reading: warn starts a warning, recovered
// ends one; both false means nothing changed.
type lateVerdict struct {
	warn, recovered bool
	share           float64 // of the window's releases later than lateBound
	releases        uint64
}

func (w *lateWatch) check(now throttle.Lateness) lateVerdict {
	win := now.Sub(w.last)
	w.last = now
	v := lateVerdict{releases: win.Count, share: win.Over(lateBound)}
	if win.Count < lateMinCount {
		return v // too few to tell; a warning stands until a real window clears it
	}
	bad := v.share > lateWarnShare
	v.warn, v.recovered = bad && !w.warned, !bad && w.warned
	w.warned = bad
	return v
}

// watchLateness logs when the delay line starts and stops releasing late.
func (a *Agent) watchLateness(ctx context.Context, s throttle.Counting) {
	w := lateWatch{last: s.Stats().Late}
	t := time.NewTicker(lateWindow)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		switch v := w.check(s.Stats().Late); {
		case v.warn:
			a.deps.Log.Warn("delay line releasing late: the agent is short of CPU, and every delay it applies is longer by as much",
				"share_over_2ms", v.share, "releases", v.releases, "window", lateWindow)
		case v.recovered:
			a.deps.Log.Info("delay line on time again", "share_over_2ms", v.share, "releases", v.releases)
		}
	}
}
