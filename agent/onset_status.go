package agent

import "math"

// noteOnset keeps the latest surge for status: a firing starts one at
// the controller's output before it (rs.onsetFrom), and the first tick
// whose output is above that is the controller's first action, at which
// the resource's in-flight requests are priced at its completion rate
// (Little's law: what is queued drains at the rate it completes). Each
// status gets a copy, so one published never changes.
func (l *Loops) noteOnset(rs *resourceState, st *ResourceStatus, fired bool, step int) {
	now := st.Updated
	if fired {
		rs.last, rs.onsetFrom = &OnsetStatus{At: now}, rs.prevStep
	}
	rs.prevStep = step
	if rs.last == nil {
		return
	}
	if rs.last.ActedAt.IsZero() && step > rs.onsetFrom {
		o := *rs.last
		o.ActedAt = now
		var n, secs float64
		for i, iv := range rs.devs.iv {
			if rs.devs.ok[i] {
				o.InFlight += iv.InFlight
				n += float64(iv.Reads + iv.Writes)
				secs = max(secs, iv.Seconds)
			}
		}
		if n > 0 {
			o.BacklogMs = math.Round(1e4*float64(o.InFlight)*secs/n) / 10
		}
		rs.last = &o
	}
	st.LastOnset = rs.last
}
