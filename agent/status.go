package agent

import (
	"time"

	"github.com/sanqos/sanqos/throttle"
)

// ResourceStatus is what a resource loop last did, for status and metrics.
type ResourceStatus struct {
	Name    string   `json:"name"`
	Devices []string `json:"devices"`
	// Unmapped says why discovery could not map the resource (no
	// discovered pool matches its name, ...): "" while it is mapped. An
	// unmapped resource measures and slows nothing; discovery retries it
	// every round.
	Unmapped    string  `json:"unmapped,omitempty"`
	IndicatorMs float64 `json:"indicator_ms"`
	RawWaitMs   float64 `json:"raw_wait_ms"`
	// SetpointMs is what the controller holds the indicator at: the
	// threshold, or below it with objective p95.
	SetpointMs float64 `json:"setpoint_ms"`
	// RateLeverStep is how far the controller is into the write-cap range
	// past the maximum delay (0: the delay alone acts).
	RateLeverStep int `json:"rate_lever_step,omitempty"`
	// FloorMs is the read wait while no writer is active (an EWMA of
	// quiet samples): what slowing writers cannot improve on. Unreachable
	// says the threshold is within 10 % of it: the write-cap lever stays
	// off, since it would only starve the writers.
	FloorMs     float64 `json:"floor_ms,omitempty"`
	Unreachable bool    `json:"unreachable,omitempty"`
	// AtMaxDelay says the controller is at max_delay and the wait still
	// above the threshold: the load needs more delay than allowed (ten
	// closed-loop random streams need about ten service times), so the
	// operator raises max_delay, names what to slow or to protect, or
	// turns the rate lever on.
	AtMaxDelay bool `json:"at_max_delay,omitempty"`
	// Onsets counts the write surges the onset detector found;
	// FeedForwardMs is the delay it would preload at the next (0 until
	// the resource has been regulated under load).
	Onsets        uint64  `json:"onsets"`
	FeedForwardMs float64 `json:"feedforward_ms"`
	// LastOnset is the latest surge (nil: none yet).
	LastOnset   *OnsetStatus `json:"last_onset,omitempty"`
	ThresholdMs float64      `json:"threshold_ms"`
	// Auto is what threshold: auto has learned (nil: a set threshold);
	// ThresholdMs is then the learned threshold, or the start while
	// Auto.State is "learning".
	Auto *AutoThresholdStatus `json:"threshold_auto,omitempty"`
	Step int                  `json:"step"`
	// Delay is the controller's delay; its JSON also carries it as
	// delay_ms, in the unit of the thresholds and waits beside it
	// (statusjson.go; delay_ns stays for scripts written against it).
	Delay        time.Duration    `json:"delay_ns"`
	Throttleable []string         `json:"throttleable"`
	Consumers    []ConsumerStatus `json:"consumers"`
	Policy       string           `json:"policy,omitempty"`
	// Classes is the slo-classes policy's per-class accounting.
	Classes []ClassStatus `json:"classes,omitempty"`
	// Network is the network saturation indicator and Reservations the
	// per-reservation accounting (reservations policy).
	Network      *NetStatus          `json:"network,omitempty"`
	Reservations []ReservationStatus `json:"reservations,omitempty"`
	Updated      time.Time           `json:"updated"`
	// Slowed is how many consumers the resource slows now (any delay or
	// cap, held ones included), and MaxReadDelay and MaxWriteDelay the
	// largest delay it gives any of them in each direction: Delay is the
	// controller's, which the policy turns into either. IO are its
	// counters. For /metrics only.
	Slowed                      int           `json:"-"`
	MaxReadDelay, MaxWriteDelay time.Duration `json:"-"`
	IO                          ResourceIO    `json:"-"`
}

// OnsetStatus is one surge as the controller met it: when the detector
// found it, when the controller first raised its output for it (zero:
// not yet), and the I/O then queued at the resource as the wait it
// would still cause a read arriving then even if every later request
// were stopped: the resource's requests in flight (diskstats) over its
// completion rate that tick, plus FloorMs, the read's own wait. It is
// what no controller acting then could save the first reads, the
// floor under the surge's first second.
type OnsetStatus struct {
	At        time.Time `json:"at"`
	ActedAt   time.Time `json:"acted_at,omitzero"`
	InFlight  uint64    `json:"in_flight,omitempty"`
	BacklogMs float64   `json:"backlog_ms,omitempty"`
}

// ConsumerStatus is one consumer of a resource.
type ConsumerStatus struct {
	Addr      string  `json:"addr"`
	ReadBps   float64 `json:"read_bps"`
	WriteBps  float64 `json:"write_bps"`
	WriteEWMA float64 `json:"write_bps_ewma"`
	Important bool    `json:"important"`
	Throttled bool    `json:"throttled"`
	// Queue is the mean number of its requests in the resource, and
	// LoadRead and LoadWrite its cost per direction in resource seconds
	// per second (smoothed over about a second): who saturates the
	// resource, and in which direction its delay goes.
	Queue     float64 `json:"queue"`
	LoadRead  float64 `json:"load_read"`
	LoadWrite float64 `json:"load_write"`
	// Setting is what the policy asked for this consumer (zero: nothing).
	Setting throttle.Setting `json:"setting,omitzero"`
	// Held: its delays are the ones it had when it last moved data,
	// kept while it is idle or has just resumed (idle_hold, hold.go).
	Held bool `json:"held,omitempty"`
	// SendSRTTMs is the smallest srtt among its connections that the
	// target sent more than one data segment this tick (ms; 0: none, or
	// no TCP_INFO; sample.Rate.SendSRTT): data
	// held for it longer than about twice this fires the target's
	// tail-loss probe timer (docs/architecture.md, "Delay rise limit").
	SendSRTTMs float64 `json:"send_srtt_ms,omitempty"`
	// IO are its counters on the resource, for /metrics only.
	IO ConsumerIO `json:"-"`
}
