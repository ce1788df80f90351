// Package cluster makes many sanqos agents — one per iSCSI target host in
// front of shared back-end resources — enforce one policy together, on an
// existing coordination engine (etcd) rather than a consensus or gossip of
// our own:
//
//   - policies live under one key and reach every agent by a watch
//     (Policies), validated by package config as a whole before they are
//     written and again when they are read;
//   - each agent publishes, per resource, its local indicator under its
//     lease (Node.Publish), so a dead agent's entry disappears with it;
//   - one agent per resource, chosen by an etcd election, aggregates every
//     agent's indicator, runs package control's PID and publishes the
//     resource's delay, fenced by its election key;
//   - every agent follows that delay while it is fresh and otherwise falls
//     back to its own local controller, with the shared delay decaying to
//     zero within a bound (Node.Delay).
//
// Node reaches etcd only through KV and waits only through Runtime, so
// that package sim runs this very Node for a hundred agents on a model of
// etcd in virtual time.
//
// It must not touch the kernel or the throttles: it only moves indicators,
// policies and delays through etcd and tells the agent's per-resource loop
// which step to use. Applying the step to packets stays the agent's job,
// through its policy and actuator, exactly as without a cluster.
//
// Imports (sanqos): agent, config, control.
package cluster

import (
	"math"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/agent"
)

// Mode says where a resource's step comes from on this agent.
type Mode string

const (
	// ModeCluster: the agent follows the resource's fresh shared step.
	ModeCluster Mode = "cluster"
	// ModeDegraded: the shared step was lost (etcd or the leader gone);
	// the agent applies the larger of its local step and what is left of
	// the last shared step, which decays to zero within Config.Decay.
	ModeDegraded Mode = "degraded"
	// ModeLocal: the agent's own controller alone, as without a cluster.
	ModeLocal Mode = "local"
)

// Consumer is one consumer an agent serves on a resource, with its rates.
type Consumer struct {
	Addr netip.Addr `json:"addr"`
	// Throttleable: the agent's policy would slow it (e.g. a writer above
	// the rate threshold).
	Throttleable bool    `json:"throttleable,omitempty"`
	ReadBps      float64 `json:"read_bps"`
	WriteBps     float64 `json:"write_bps"`
}

// Indicator is what one agent measured on one resource in one tick.
type Indicator struct {
	// WaitMs is the value the local controller was fed: the smoothed read
	// wait (scaled by the tail estimate with objective p95), NaN if the
	// agent saw no reads yet.
	WaitMs float64 `json:"wait_ms"`
	// ReadBps and WriteBps are the agent's traffic on the resource. ReadBps
	// weighs its wait in the aggregate (see aggregate).
	ReadBps  float64 `json:"read_bps"`
	WriteBps float64 `json:"write_bps"`
	// LocalStep is the local controller's output: where a new shared
	// controller starts when there was no shared step (bumpless rejoin).
	LocalStep int        `json:"local_step"`
	Consumers []Consumer `json:"consumers,omitempty"`
	// Leads and Share are the agent's leadership load, the same in each
	// of its indicators: how many resources it leads and its fair share
	// of them (see HandOver). The node sets them when it writes the
	// indicator; Share 0 (an agent that does not balance) is never handed
	// a resource.
	Leads int     `json:"leads,omitempty"`
	Share float64 `json:"share,omitempty"`
}

// MarshalJSON-friendly: NaN is not JSON, so WaitMs travels as null.
type wireIndicator struct {
	Indicator
	WaitMs *float64  `json:"wait_ms"`
	Time   time.Time `json:"time"`
}

func (i Indicator) wire(now time.Time) wireIndicator {
	w := wireIndicator{Indicator: i, Time: now}
	if !math.IsNaN(i.WaitMs) && !math.IsInf(i.WaitMs, 0) {
		v := i.WaitMs
		w.WaitMs = &v
	}
	return w
}

func (w wireIndicator) indicator() Indicator {
	i := w.Indicator
	i.WaitMs = math.NaN()
	if w.WaitMs != nil {
		i.WaitMs = *w.WaitMs
	}
	return i
}

// Shared is a resource's delay as its leader publishes it.
type Shared struct {
	Seq    uint64    `json:"seq"`
	Leader string    `json:"leader"`
	Time   time.Time `json:"time"`
	Step   int       `json:"step"`
	// WaitMs is the aggregate the step was computed from (NaN: none).
	WaitMs  *float64 `json:"wait_ms,omitempty"`
	Agents  int      `json:"agents"`
	DelayNs int64    `json:"delay_ns"`
	// Consumers are the consumers the step applies to: every consumer some
	// agent found throttleable, whichever target host it connects through.
	// Each agent applies the step to the ones it serves.
	Consumers []netip.Addr `json:"consumers,omitempty"`
	// Yield asks the candidate named, whose election key has create
	// revision YieldRev, to campaign again from the back of the line
	// (Balance): a lighter agent stands behind it.
	Yield    string `json:"yield,omitempty"`
	YieldRev int64  `json:"yield_rev,omitempty"`
}

// Seam is what an agent's per-resource loop calls each tick: Publish its
// local indicator, then ask for the step to apply. Node implements it.
type Seam interface {
	Publish(resource string, ind Indicator, now time.Time)
	// Delay returns the step to apply given the local controller's step,
	// and where it came from.
	Delay(resource string, local int, now time.Time) (step int, mode Mode)
}

// Controller wraps a resource's local controller so the agent's loop goes
// through the seam without knowing it: the agent builds controllers through
// agent.Deps.NewController, so wiring a cluster into the agent is a matter
// of that function, not of the loop (see cmd/sanqos). Each Update feeds the
// local controller (which keeps running in every mode, so a fallback finds
// it warm), publishes the indicator and returns the seam's step.
//
// details, if set, adds what the controller cannot see (traffic,
// consumers) from the agent's last status of the resource.
func Controller(s Seam, resource string, local agent.Controller, now func() time.Time, details func(resource string) Indicator) agent.Controller {
	if now == nil {
		now = time.Now
	}
	return &seamController{s: s, res: resource, local: local, now: now, details: details}
}

type seamController struct {
	s       Seam
	res     string
	local   agent.Controller
	now     func() time.Time
	details func(string) Indicator
}

func (c *seamController) Update(measured float64) int {
	step := c.local.Update(measured)
	var ind Indicator
	if c.details != nil {
		ind = c.details(c.res)
	}
	ind.WaitMs, ind.LocalStep = measured, step
	t := c.now()
	c.s.Publish(c.res, ind, t)
	out, _ := c.s.Delay(c.res, step, t)
	return out
}

func (c *seamController) Reset() { c.local.Reset() }

// Output and Preset reach the local controller, so a reload that changes
// the threshold (agent.retarget) carries the local loop's state over.
func (c *seamController) Output() int {
	if o, ok := c.local.(interface{ Output() int }); ok {
		return o.Output()
	}
	return 0
}

func (c *seamController) Preset(step int) {
	if p, ok := c.local.(interface{ Preset(int) }); ok {
		p.Preset(step)
	}
}

// Details turns the agent's status of a resource into the indicator's
// traffic and consumers (WaitMs and LocalStep come from the controller).
func Details(st agent.ResourceStatus) Indicator {
	ind := Indicator{Consumers: make([]Consumer, 0, len(st.Consumers))}
	thr := make(map[string]bool, len(st.Throttleable))
	for _, a := range st.Throttleable {
		thr[a] = true
	}
	for _, c := range st.Consumers {
		ind.ReadBps += c.ReadBps
		ind.WriteBps += c.WriteBps
		a, err := netip.ParseAddr(c.Addr)
		if err != nil {
			continue
		}
		if thr[c.Addr] || c.ReadBps > 0 || c.WriteBps > 0 {
			ind.Consumers = append(ind.Consumers, Consumer{Addr: a, Throttleable: thr[c.Addr], ReadBps: c.ReadBps, WriteBps: c.WriteBps})
		}
	}
	return ind
}
