package cluster

import (
	"math"
	"net/netip"
	"slices"
)

// inIDOrder is every agent's indicator of a resource — agents as
// received, with this agent's own (id, own) laid over its echo, which is
// older — in the order of the agents' ids. The aggregates below add
// floats, and a float sum depends on the order of its terms: summed in a
// map's order, which Go draws afresh for every range, the same indicators
// gave a wait differing in its last digits from one tick (or run) to the
// next, so the simulator's figures differed between runs of one seed. In
// id order the same indicators always give the same wait.
func inIDOrder(id string, own Indicator, agents map[string]Indicator) []Indicator {
	ids := make([]string, 0, len(agents)+1)
	for k := range agents {
		if k != id {
			ids = append(ids, k)
		}
	}
	ids = append(ids, id)
	slices.Sort(ids)
	out := make([]Indicator, len(ids))
	for i, k := range ids {
		if k == id {
			out[i] = own
		} else {
			out[i] = agents[k]
		}
	}
	return out
}

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
// agents come in a fixed order (inIDOrder), so the sums are reproducible.
func aggregate(agents []Indicator) (wait, weight float64) {
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
func weightedLocalStep(agents []Indicator) int {
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
func throttleable(agents []Indicator) []netip.Addr {
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
