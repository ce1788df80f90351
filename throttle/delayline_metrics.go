package throttle

import (
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
)

// The delay line's own metrics (its registry entry's Collector): what it
// held per consumer, and its totals that belong to no consumer.
type dlCollector struct {
	d                                Counting
	packets, bytes, acks, overflow   *prometheus.Desc
	held, unclassified, errors, late *prometheus.Desc
}

// Counting is a backend that counts what it held (the delay line): per
// consumer, and its totals that belong to no consumer. The agent's API,
// its lateness watch and the entry's collector read it (CountingOf).
type Counting interface {
	Counters() map[netip.Addr]DelayCounters
	Stats() DelayLineStats
}

// CountingOf is the part of t that counts (the delay line, alone or
// under write caps), or nil where t holds no packets.
func CountingOf(t Throttle) Counting {
	if l, ok := t.(*layered); ok {
		t = l.delay
	}
	c, _ := t.(Counting)
	return c
}

func dlDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("sanqos_delayline_"+name, help, labels, nil)
}

// delayLineCollector is the collector of t's delay line (alone or under
// write caps); of no throttle, one that only describes.
func delayLineCollector(t Throttle) prometheus.Collector {
	if t == nil {
		return newDLCollector(nil)
	}
	if d := CountingOf(t); d != nil {
		return newDLCollector(d)
	}
	return nil
}

func newDLCollector(d Counting) *dlCollector {
	return &dlCollector{d: d,
		packets:      dlDesc("packets_total", "Packets held by the delay line.", "consumer"),
		bytes:        dlDesc("bytes_total", "Bytes held by the delay line.", "consumer"),
		acks:         dlDesc("acks_total", "Pure ACKs held by the delay line (the write delay's packets).", "consumer"),
		overflow:     dlDesc("passed_at_limit_total", "Packets accepted without delay because the queue was full (fail open).", "consumer"),
		held:         dlDesc("held_packets", "Packets the delay line holds now."),
		unclassified: dlDesc("unclassified_packets_total", "Queued packets that matched no consumer and were accepted at once."),
		errors:       dlDesc("errors_total", "Netlink receive and verdict errors of the delay line."),
		late:         dlDesc("release_lateness_seconds", "How late held packets left against their due time (added to the delay; ms means the line lacked CPU)."),
	}
}

func (c *dlCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.packets, c.bytes, c.acks, c.overflow, c.held, c.unclassified, c.errors, c.late} {
		ch <- d
	}
}

func (c *dlCollector) Collect(ch chan<- prometheus.Metric) {
	k := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for a, n := range c.d.Counters() {
		k(c.packets, n.Packets, a.String())
		k(c.bytes, n.Bytes, a.String())
		k(c.acks, n.Acks, a.String())
		k(c.overflow, n.PassedAtLimit, a.String())
	}
	s := c.d.Stats()
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(s.Held))
	k(c.unclassified, s.Unclassified)
	k(c.errors, s.Errors)
	// The line's own buckets (per bucket) as Prometheus' (cumulative, in
	// seconds).
	buckets := make(map[float64]uint64, len(LateBounds))
	var cum uint64
	for i, b := range LateBounds {
		cum += s.Late.Counts[i]
		buckets[b.Seconds()] = cum
	}
	ch <- prometheus.MustNewConstHistogram(c.late, s.Late.Count, s.Late.Sum.Seconds(), buckets)
}
