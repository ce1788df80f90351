package agent

import (
	"net/netip"

	"github.com/sanqos/sanqos/sample"
)

// IOTotals count what a resource, or one consumer on it, moved and
// waited since the agent started. They are exported as Prometheus
// counters so that rate() over any window gives the mean rate and wait
// over I/Os the mean wait (iostat's r_await) over that window: the
// status' rates and waits are one tick's (100 ms), which a 15 s scrape
// samples rather than averages. They only count; nothing decides on
// them.
type IOTotals struct {
	ReadBytes, WrittenBytes float64
	Reads, Writes           float64
	// ReadWaitSeconds and WriteWaitSeconds are the summed time each
	// completed I/O spent (diskstats' read and write ticks).
	ReadWaitSeconds, WriteWaitSeconds float64
}

// addInterval adds one device's interval.
func (t *IOTotals) addInterval(iv *sample.Interval) {
	t.ReadBytes += iv.ReadBps * iv.Seconds
	t.WrittenBytes += iv.WriteBps * iv.Seconds
	t.Reads += float64(iv.Reads)
	t.Writes += float64(iv.Writes)
	if iv.Reads > 0 {
		t.ReadWaitSeconds += iv.ReadWaitMs * float64(iv.Reads) / 1e3
	}
	if iv.Writes > 0 {
		t.WriteWaitSeconds += iv.WriteWaitMs * float64(iv.Writes) / 1e3
	}
}

// ResourceIO is a resource's counters: all its devices', and the reads
// its indicator measured (the devices the policy protects, without the
// slowed consumers' where it leaves them out), whose wait over reads is
// the indicator's unsmoothed mean over any window.
type ResourceIO struct {
	IOTotals
	IndicatorReads, IndicatorReadWaitSeconds float64
}

// ConsumerIO is what the agent can tell of one consumer on a resource.
// Bytes come from the wire where the agent samples TCP_INFO, else from
// its devices where they are its own (HasBytes); reads, writes and
// waits only from devices that are its own (HasIO): diskstats cannot
// split a device several consumers share.
type ConsumerIO struct {
	IOTotals
	HasBytes, HasIO bool
}

// ioCounts is a resource's counters between ticks; cons is aligned with
// plan's consumers and rebuilt (carried over by address from the plan
// before, dropping those that left) when the plan is recompiled.
type ioCounts struct {
	res  ResourceIO
	plan *plan
	cons []ConsumerIO
	// again marks the plan's devices named before (a view may list a
	// device twice): each is counted once.
	again []bool
}

// count adds this tick's intervals and wire bytes to rs's counters and
// puts them on the status. wire: the agent samples TCP_INFO, so the
// consumers' bytes are the wire's (0 without a connection this tick).
func (rs *resourceState) count(st *ResourceStatus, d devIntervals, ind indication, rates map[netip.Addr]sample.Rate, wire bool) {
	c := &rs.io
	p := rs.plan
	if c.plan != p {
		c.realign(p)
	}
	for i := range p.devices {
		if d.ok[i] && !c.again[i] {
			c.res.addInterval(&d.iv[i])
		}
	}
	c.res.IndicatorReads += ind.reads
	c.res.IndicatorReadWaitSeconds += ind.readTicks / 1e3
	st.IO = c.res
	for k := range p.consumers {
		pc, t := &p.consumers[k], &c.cons[k]
		var own IOTotals
		for _, i := range pc.devs {
			if i >= 0 && d.ok[i] {
				own.addInterval(&d.iv[i])
			}
		}
		t.HasIO = pc.exclusive
		t.HasBytes = wire || pc.exclusive
		switch {
		case wire:
			r := rates[pc.addr]
			t.ReadBytes += float64(r.ReadBytes)
			t.WrittenBytes += float64(r.WriteBytes)
		case pc.exclusive:
			t.ReadBytes += own.ReadBytes
			t.WrittenBytes += own.WrittenBytes
		}
		if pc.exclusive {
			t.Reads += own.Reads
			t.Writes += own.Writes
			t.ReadWaitSeconds += own.ReadWaitSeconds
			t.WriteWaitSeconds += own.WriteWaitSeconds
		}
		if k < len(st.Consumers) {
			st.Consumers[k].IO = *t
		}
	}
}

// realign keeps the counters of p's consumers, in p's order, and forgets
// those of consumers that left.
func (c *ioCounts) realign(p *plan) {
	old, oldCons := c.plan, c.cons
	c.plan, c.cons = p, make([]ConsumerIO, len(p.consumers))
	c.again = make([]bool, len(p.devices))
	seen := make(map[string]bool, len(p.devices))
	for i, name := range p.devices {
		c.again[i], seen[name] = seen[name], true
	}
	for k, pc := range p.consumers {
		if j, ok := old.indexOf(pc.addr); ok && j < len(oldCons) {
			c.cons[k] = oldCons[j]
		}
	}
}
