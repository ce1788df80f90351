package agent

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sanqos/sanqos/throttle"
)

// collector exposes the loops' and the backend's state at scrape time, so
// the metrics are never a second copy of the truth.
type collector struct {
	// status is the loops' status (a func, not *Loops, so the collector
	// can be tested on a fixed document).
	status func() []ResourceStatus
	t      throttle.Throttle
	descs  map[string]*prometheus.Desc
	io     map[string]*prometheus.Desc // ioDescs
}

func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("sanqos_"+name, help, labels, nil)
}

func newCollector(status func() []ResourceStatus, t throttle.Throttle) *collector {
	return &collector{status: status, t: t, descs: map[string]*prometheus.Desc{
		"indicator":    newDesc("resource_indicator_seconds", "Smoothed read wait (EWMA) of the resource: the controlled variable.", "resource"),
		"threshold":    newDesc("resource_threshold_seconds", "Read-wait threshold of the resource.", "resource"),
		"setpoint":     newDesc("resource_setpoint_seconds", "What the controller holds the indicator at: the threshold, or below it with objective p95.", "resource"),
		"output":       newDesc("resource_controller_output_steps", "Controller output in delay steps.", "resource"),
		"delay":        newDesc("resource_controller_delay_seconds", "The controller's output as a delay (capped at max_delay), which the policy gives the throttleable set in the direction each saturates.", "resource"),
		"rdelay":       newDesc("resource_delay_seconds", "Largest delay the resource gives any of its consumers now, per direction (held ones included).", "resource", "direction"),
		"slowed":       newDesc("resource_throttled_consumers", "Consumers the resource slows now (any delay or cap, held ones included): 0 above the threshold means nobody is slowed.", "resource"),
		"setsize":      newDesc("resource_throttleable_consumers", "Size of the resource's throttleable set.", "resource"),
		"cdelay":       newDesc("consumer_delay_seconds", "Delay applied to the consumer's packets.", "consumer", "direction"),
		"crate_cap":    newDesc("consumer_rate_cap_bytes_per_second", "Rate cap applied to the consumer.", "consumer"),
		"cload":        newDesc("consumer_load_seconds_per_second", "Consumer's estimated cost on the resource per direction, in seconds of the resource's service per second (smoothed): which direction it saturates.", "resource", "consumer", "direction"),
		"cqueue":       newDesc("consumer_queue_requests", "Mean number of the consumer's requests in the resource (smoothed): at throttleable_queue it counts as saturating it.", "resource", "consumer"),
		"cthrottled":   newDesc("consumer_throttled", "1 while the resource's controller delays the consumer (throttleable and output above zero).", "resource", "consumer"),
		"backend_info": newDesc("backend_info", "The throttle backend in use.", "backend"),
		"onsets":       newDesc("resource_onsets_total", "Write surges the onset detector found on the resource.", "resource"),
		"feedforward":  newDesc("resource_feedforward_seconds", "Delay the onset feed-forward preloads at the next surge (0 until the resource has been regulated under load).", "resource"),
		"floor":        newDesc("resource_floor_seconds", "Read wait while no writer is active: what slowing writers cannot improve on.", "resource"),
		"unreachable":  newDesc("resource_unreachable", "1 while the threshold is within 10 % of the floor (0 while the floor is unknown).", "resource"),
		"lever":        newDesc("resource_rate_lever_steps", "How far the controller is into the write-cap range past the maximum delay.", "resource"),
		"cwrate_cap":   newDesc("consumer_write_rate_cap_bytes_per_second", "Write-rate cap applied to the consumer (the second lever).", "consumer"),
		"class_iops":   newDesc("class_iops", "SLO class's IOPS over the last interval (slo-classes).", "resource", "class"),
		"class_bps":    newDesc("class_bytes_per_second", "SLO class's throughput over the last interval.", "resource", "class"),
		"class_lat":    newDesc("class_latency_seconds", "SLO class's I/O-weighted wait over the last interval.", "resource", "class"),
		"class_credit": newDesc("class_burst_credit_seconds", "SLO class's banked burst, in seconds of its objective.", "resource", "class"),
		"class_miss":   newDesc("class_missing", "1 while the SLO class misses an objective.", "resource", "class"),
		"class_tdev":   newDesc("class_throughput_deviation_percent", "Seed 004 eq. (1) over the class's life: (attained − expected)/expected × 100, MB/s.", "resource", "class"),
		"class_ldev":   newDesc("class_latency_deviation_seconds", "Seed 004 eq. (2) over the class's life: observed − expected latency.", "resource", "class"),
		"net_queue":    newDesc("resource_net_queue_seconds", "Network indicator (reservations): queueing delay srtt − min_rtt of the least-delayed active flow, our own delay discounted.", "resource"),
		"resv_laxity":  newDesc("reservation_laxity_ratio", "Reservation's %laxity in its current period (1: met; ≤ 0: cannot make it at its current rate).", "resource", "consumer"),
		"resv_met":     newDesc("reservation_periods_met_total", "Ended periods in which the reservation was attained.", "resource", "consumer"),
		"resv_periods": newDesc("reservation_periods_total", "Ended periods of the reservation.", "resource", "consumer"),
		"class_jitter": newDesc("class_jitter_seconds", "Mean absolute difference of consecutive per-interval latencies over the class's life.", "resource", "class"),
		"mapped":       newDesc("resource_mapped", "1 while discovery maps the configured resource to devices, 0 while it is unmapped (it then measures and slows nothing; status and the log say why).", "resource"),
		"updated":      newDesc("resource_updated_timestamp_seconds", "When the resource's loop last published its status (Unix time): falling behind the clock means the loop is stuck (sampling, or a backend that does not return).", "resource"),
	}, io: ioDescs()}
}

// ioDescs are the counters of IOTotals, per resource and per consumer,
// and of the indicator's reads.
func ioDescs() map[string]*prometheus.Desc {
	d := map[string]*prometheus.Desc{
		"ind_reads": newDesc("resource_indicator_reads_total", "Reads the indicator measured (the protected devices' reads): with resource_indicator_read_wait_seconds_total, the indicator's unsmoothed mean over any window.", "resource"),
		"ind_wait":  newDesc("resource_indicator_read_wait_seconds_total", "Summed wait of the reads the indicator measured.", "resource"),
	}
	for _, who := range []struct{ prefix, of string }{
		{"resource", "the resource's devices (diskstats)"},
		{"consumer", "the consumer on the resource (bytes: the wire where the agent samples TCP_INFO, else its own devices; I/Os and waits: only from devices no other consumer uses)"},
	} {
		labels := []string{"resource"}
		if who.prefix == "consumer" {
			labels = append(labels, "consumer")
		}
		for _, m := range []struct{ key, name, help string }{
			{"read_bytes", "read_bytes_total", "Bytes read by "},
			{"written_bytes", "written_bytes_total", "Bytes written by "},
			{"reads", "reads_total", "Reads completed by "},
			{"writes", "writes_total", "Writes completed by "},
			{"read_wait", "read_wait_seconds_total", "Summed wait of the reads completed by "},
			{"write_wait", "write_wait_seconds_total", "Summed wait of the writes completed by "},
		} {
			d[who.prefix+"_"+m.key] = newDesc(who.prefix+"_"+m.name, m.help+who.of+".", labels...)
		}
	}
	return d
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	for _, d := range c.io {
		ch <- d
	}
}

// collectIO exports a resource's counters and its consumers'.
func (c *collector) collectIO(ch chan<- prometheus.Metric, s ResourceStatus) {
	k := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.io[name], prometheus.CounterValue, v, labels...)
	}
	totals := func(prefix string, t IOTotals, bytes, ios bool, labels ...string) {
		if bytes {
			k(prefix+"_read_bytes", t.ReadBytes, labels...)
			k(prefix+"_written_bytes", t.WrittenBytes, labels...)
		}
		if ios {
			k(prefix+"_reads", t.Reads, labels...)
			k(prefix+"_writes", t.Writes, labels...)
			k(prefix+"_read_wait", t.ReadWaitSeconds, labels...)
			k(prefix+"_write_wait", t.WriteWaitSeconds, labels...)
		}
	}
	totals("resource", s.IO.IOTotals, true, true, s.Name)
	k("ind_reads", s.IO.IndicatorReads, s.Name)
	k("ind_wait", s.IO.IndicatorReadWaitSeconds, s.Name)
	for _, cs := range s.Consumers {
		totals("consumer", cs.IO.IOTotals, cs.IO.HasBytes, cs.IO.HasIO, s.Name, cs.Addr)
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	g := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.GaugeValue, v, labels...)
	}
	for _, s := range c.status() {
		g("mapped", b2f(s.Unmapped == ""), s.Name)
		g("indicator", s.IndicatorMs/1e3, s.Name)
		g("threshold", s.ThresholdMs/1e3, s.Name)
		if s.SetpointMs > 0 {
			g("setpoint", s.SetpointMs/1e3, s.Name)
		}
		g("output", float64(s.Step), s.Name)
		g("delay", s.Delay.Seconds(), s.Name)
		g("rdelay", s.MaxReadDelay.Seconds(), s.Name, "read")
		g("rdelay", s.MaxWriteDelay.Seconds(), s.Name, "write")
		g("slowed", float64(s.Slowed), s.Name)
		c.collectIO(ch, s)
		g("setsize", float64(len(s.Throttleable)), s.Name)
		ch <- prometheus.MustNewConstMetric(c.descs["onsets"], prometheus.CounterValue, float64(s.Onsets), s.Name)
		g("feedforward", s.FeedForwardMs/1e3, s.Name)
		if s.FloorMs > 0 {
			g("floor", s.FloorMs/1e3, s.Name)
		}
		g("unreachable", b2f(s.Unreachable), s.Name) // 0 while the floor is unknown
		g("lever", float64(s.RateLeverStep), s.Name)
		if !s.Updated.IsZero() {
			g("updated", float64(s.Updated.UnixNano())/1e9, s.Name)
		}
		for _, k := range s.Classes {
			g("class_iops", float64(k.IOPS), s.Name, k.Name)
			g("class_bps", float64(k.MBs)*1e6, s.Name, k.Name)
			g("class_lat", float64(k.LatencyMs)/1e3, s.Name, k.Name)
			g("class_credit", k.CreditS, s.Name, k.Name)
			g("class_miss", b2f(k.Missing), s.Name, k.Name)
			g("class_tdev", float64(k.ThroughputDeviationPct), s.Name, k.Name)
			g("class_ldev", float64(k.LatencyDeviationMs)/1e3, s.Name, k.Name)
			g("class_jitter", float64(k.JitterMs)/1e3, s.Name, k.Name)
		}
		if n := s.Network; n != nil {
			g("net_queue", float64(n.QueueMs)/1e3, s.Name)
		}
		for _, r := range s.Reservations {
			g("resv_laxity", float64(r.LaxityPct), s.Name, r.Consumer)
			ch <- prometheus.MustNewConstMetric(c.descs["resv_met"], prometheus.CounterValue, float64(r.PeriodsMet), s.Name, r.Consumer)
			ch <- prometheus.MustNewConstMetric(c.descs["resv_periods"], prometheus.CounterValue, float64(r.Periods), s.Name, r.Consumer)
		}
		for _, cs := range s.Consumers {
			g("cload", cs.LoadRead, s.Name, cs.Addr, "read")
			g("cload", cs.LoadWrite, s.Name, cs.Addr, "write")
			g("cqueue", cs.Queue, s.Name, cs.Addr)
			g("cthrottled", b2f(cs.Throttled), s.Name, cs.Addr)
		}
	}
	c.collectBackend(ch)
}

// collectBackend exports what the throttle backend holds: each
// consumer's applied settings (its own metrics are its registry entry's
// collector: throttle.CollectorOf).
func (c *collector) collectBackend(ch chan<- prometheus.Metric) {
	g := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.GaugeValue, v, labels...)
	}
	for a, s := range c.t.List() {
		g("cdelay", s.ReadDelay.Seconds(), a.String(), "read")
		g("cdelay", s.WriteDelay.Seconds(), a.String(), "write")
		if s.Rate > 0 {
			g("crate_cap", float64(s.Rate), a.String())
		}
		if s.WriteRate > 0 {
			g("cwrate_cap", float64(s.WriteRate), a.String())
		}
	}
	g("backend_info", 1, c.t.Name())
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// portsCollector exports the TCP ports the target exports on that the
// agent does not throttle (Topology.Unthrottled), one series each, so an
// alert can name the port.
type portsCollector struct{ ports func() []uint16 }

var unthrottledDesc = newDesc("unthrottled_port", "1 for each TCP port the target exports on that the agent neither throttles nor samples: its hosts are counted as consumers, but their traffic is neither delayed nor measured. Absent while there is none.", "port")

func (portsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- unthrottledDesc }

func (c portsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.ports() {
		ch <- prometheus.MustNewConstMetric(unthrottledDesc, prometheus.GaugeValue, 1, strconv.Itoa(int(p)))
	}
}
