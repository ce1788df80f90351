package cluster

import (
	"math"
	"net/netip"
	"slices"
)

// aggregate combines the agents' waits into the resource's indicator: the
// mean weighted by each agent's read traffic. The back end has one read
// wait; each agent samples it through the reads its own LUNs complete, so
// weighting by reads gives the mean over every read in the SAN, as if
// measured in one place — the same weighting the agent already uses across
// a resource's devices. An unweighted mean would let a host that saw one
// read in the interval count as much as one that saw thousands. Read bytes
// stand in for read counts (the agent's status has the former); if no agent
// reports traffic, agents with a wait count equally. NaN if nobody has a
// wait: the PID then holds its output, as it does for a local sampling gap.
func aggregate(agents map[string]Indicator) (wait, weight float64) {
	var sum, w, plain float64
	var n int
	for _, a := range agents {
		if math.IsNaN(a.WaitMs) || math.IsInf(a.WaitMs, 0) {
			continue
		}
		plain += a.WaitMs
		n++
		if a.ReadBps > 0 {
			sum += a.WaitMs * a.ReadBps
			w += a.ReadBps
		}
	}
	switch {
	case w > 0:
		return sum / w, w
	case n > 0:
		return plain / float64(n), 0
	}
	return math.NaN(), 0
}

// weightedLocalStep is where a new shared controller starts when there
// was no shared step: the agents' local outputs, weighted like their
// waits, rounded up (a throttle in force is not lightened by the takeover).
func weightedLocalStep(agents map[string]Indicator) int {
	var sum, w float64
	hi := 0
	for _, a := range agents {
		hi = max(hi, a.LocalStep)
		if a.ReadBps > 0 {
			sum += float64(a.LocalStep) * a.ReadBps
			w += a.ReadBps
		}
	}
	if w == 0 {
		return hi
	}
	return int(math.Ceil(sum/w - 1e-9))
}

// throttleable is the union of every agent's throttleable consumers.
func throttleable(agents map[string]Indicator) []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for _, a := range agents {
		for _, c := range a.Consumers {
			if c.Throttleable && !seen[c.Addr] {
				seen[c.Addr] = true
				out = append(out, c.Addr)
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}
