package sim

import "time"

// stall is a read's additive delay (ReadStall): drawn only when
// ReadStallProb > 0 and another consumer has an active job on the
// resource, so a model without it draws nothing extra.
func (m *Model) stall(r *request, ri int) time.Duration {
	if r.write || m.P.ReadStallProb <= 0 || m.P.ReadStall <= 0 {
		return 0
	}
	me := m.jobs[r.job].Consumer
	busy := false
	var delay time.Duration
	for i, j := range m.jobs {
		if j.Consumer != me && m.devs[m.jobDev[i]].res == ri && j.active(m.now) {
			busy = true
			delay = max(delay, m.thr.get(j.Consumer).WriteDelay)
		}
	}
	p := m.P.ReadStallProb
	if m.P.ReadStallDelay > 0 {
		p = min(1, p*float64(delay)/float64(m.P.ReadStallDelay))
	}
	if !busy || p <= 0 || m.rng.Float64() >= p {
		return 0
	}
	s := float64(m.P.ReadStall)
	if m.P.Jitter > 0 {
		s *= 1 + m.P.Jitter*(2*m.rng.Float64()-1)
	}
	return time.Duration(s)
}
