package agent

import (
	"math"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/cost"
	"github.com/sanqos/sanqos/throttle"
)

// Policy decides, once per tick of one resource, who is slowed and how,
// from what the loop measured and what the controller asked for. The loop
// owns measuring (indicator, rates, IOPS, latencies), the controller and
// actuation; a policy only maps measurements to settings, so a new policy
// is one file with no I/O. Each resource gets its own Policy value (from
// ResourceSpec.NewPolicy), so a policy may keep state between ticks (the
// slo-classes credits); it is called by one goroutine at a time.
type Policy interface {
	// Name is the config's policy name.
	Name() string
	// Indicator says whose reads the indicator measures.
	Indicator() IndicatorScope
	// Decide returns the tick's settings. It must not keep in (the loop
	// reuses it) or out.
	Decide(in *PolicyInput) PolicyOutput
}

// IndicatorScope is whose read wait a policy's indicator measures.
type IndicatorScope int

const (
	// IndicatorAll: every device of the resource.
	IndicatorAll IndicatorScope = iota
	// IndicatorImportant: the important consumers' devices only
	// (important-sets, thesis 5.7).
	IndicatorImportant
	// IndicatorUnthrottled: the devices of the consumers the policy does
	// not slow (last tick's throttleable set), so a bulk reader's own
	// waits are not the thing protected. A device shared with a consumer
	// outside the set still counts, and with nobody outside it every
	// device does.
	IndicatorUnthrottled
)

// PolicyInput is one resource's tick, as a policy sees it.
type PolicyInput struct {
	Now      time.Time
	Interval time.Duration
	// IndicatorMs is the smoothed indicator (NaN: no reads yet).
	IndicatorMs float64
	ThresholdMs float64
	// Output is the controller's delay for this tick (0: not saturated).
	Output    time.Duration
	DelayStep time.Duration
	MaxDelay  time.Duration
	// WriteBps is the throttleable-set threshold (thesis 4.5.1).
	WriteBps float64
	// BulkQueue is the queue (mean requests in the resource) at which a
	// consumer saturates it in any direction, and ReadBps the read rate
	// (saturation.go; 0: neither rule, only the thesis' writers).
	BulkQueue float64
	ReadBps   float64
	// Consumers in status order (sorted by address string), then the
	// static throttleable consumers discovery has not seen (HasDevices
	// false, no rates).
	Consumers []ConsumerInput

	// Buffers the loop lends a policy for its output, reused every tick
	// (a 10,000-consumer tick otherwise allocated them afresh): take them
	// with settings() and throttleable().
	settingsBuf []throttle.Setting
	thrBuf      []int
	// plan is the loop's layout of Consumers (nil outside the loop): a
	// policy may keep state by index while it is the same.
	plan *plan
}

// settings returns PolicyOutput.Settings with nobody slowed.
func (in *PolicyInput) settings() []throttle.Setting {
	in.settingsBuf = grow(in.settingsBuf, len(in.Consumers))
	clear(in.settingsBuf)
	return in.settingsBuf
}

// throttleable returns an empty slice for PolicyOutput.Throttleable.
func (in *PolicyInput) throttleable() []int { return in.thrBuf[:0] }

// ConsumerInput is one consumer's measurements for the tick. Rates come
// from the wire when the agent samples TCP_INFO, else from its devices;
// IOPS and latencies always come from its devices (NaN latency: no I/O of
// that kind completed in the interval).
type ConsumerInput struct {
	Addr       netip.Addr
	HasDevices bool
	Important  bool
	Static     bool // listed throttleable in config
	ReadBps    float64
	WriteBps   float64
	WriteEWMA  float64
	ReadIOPS   float64
	WriteIOPS  float64
	ReadWaitMs float64
	// WriteWaitMs is the devices' write await.
	WriteWaitMs float64
	// Queue is the smoothed mean number of its requests in the resource,
	// and Load its smoothed cost per direction in resource seconds per
	// second (saturation.go).
	Queue float64
	Load  cost.Load
	// ReadEWMA is its read rate smoothed over two seconds (B/s), and
	// ReadSize its mean read over them (bytes; 0: unknown).
	ReadEWMA, ReadSize float64
	// Network signals from the target's TCP_INFO (sample.Rate; NaN or 0
	// when the agent does not sample TCP_INFO or the consumer has no
	// connection): queueing delay srtt − min_rtt, srtt, the target's
	// delivery rate to it and its bytes in flight.
	QueueMs     float64
	SRTTMs      float64
	DeliveryBps float64
	InFlight    float64
}

// PolicyOutput is a policy's decision.
type PolicyOutput struct {
	// Settings by index into PolicyInput.Consumers; zero means not
	// slowed (nil: nobody). A map by address cost a tenth of a
	// 10,000-consumer tick, in hashing and in indexing it again.
	Settings []throttle.Setting
	// Throttleable lists who the policy would slow under saturation (for
	// status), as indexes into PolicyInput.Consumers, ascending: the loop
	// already holds every consumer's name, and formatting addresses per
	// tick was a third of a 10,000-consumer tick.
	Throttleable []int
	// Classes is per-class accounting (slo-classes only).
	Classes []ClassStatus
	// Network and Reservations are the reservations policy's network
	// indicator and per-reservation accounting.
	Network      *NetStatus
	Reservations []ReservationStatus
}

// roundUpStep rounds d up to whole delay steps and caps it at max, as the
// controller's own output is quantised (the backends apply 0.5 ms steps).
func roundUpStep(d, step, maxD time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if step > 0 {
		d = time.Duration(math.Ceil(float64(d)/float64(step))) * step
	}
	return min(d, maxD)
}

// PolicyFactory builds a configured resource's policy (config.Policies;
// config validation guarantees the name and the addresses).
func PolicyFactory(r config.Resource) func() Policy {
	switch r.Policy {
	case "important-sets":
		return ImportantSets
	case "weighted":
		w := map[netip.Addr]float64{}
		for s, v := range r.Weights {
			if a, err := netip.ParseAddr(s); err == nil {
				w[a.Unmap()] = v
			}
		}
		return func() Policy { return Weighted(w) }
	case "slo-classes":
		var cls []SLOClass
		for _, c := range r.Classes {
			sc := SLOClass{Name: c.Name, Priority: c.Priority, IOPS: c.IOPS, MBs: c.MBs, Latency: c.Latency, Burst: c.Burst}
			for _, m := range c.Members {
				if a, err := netip.ParseAddr(m); err == nil {
					sc.Members = append(sc.Members, a.Unmap())
				}
			}
			cls = append(cls, sc)
		}
		return func() Policy { return SLOClasses(cls) }
	case "reservations":
		return reservationsFactory(r)
	}
	return ReadOverWrite
}
