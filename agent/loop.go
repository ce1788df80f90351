package agent

import (
	"context"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sanqos/sanqos/control"
	"github.com/sanqos/sanqos/cost"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// Controller turns a resource's indicator into a throttle step (0 = none).
// control.PID implements it; so can any other controller.
type Controller interface {
	Update(measured float64) int
	Reset()
}

// Smoother filters a noisy signal (filter.EWMA implements it); ok is
// false until it has seen a sample.
type Smoother interface {
	Update(x float64) (float64, bool)
	Value() (float64, bool)
}

// Sampler returns the cumulative counters of block devices.
type Sampler interface {
	Read(devices ...string) (map[string]sample.Counters, error)
}

// RateSampler reports per-consumer traffic on the storage port
// (sample.TCPRates): the consumers' write rates when the LUN-to-consumer
// map is unknown, e.g. several initiators on one target.
type RateSampler interface {
	Sample() (map[netip.Addr]sample.Rate, error)
}

// generation is what one tick runs on, loaded once at its start: the
// resources' specs and the topology that maps them. Discovery and
// reloads publish a new one whole (swap), so a tick never runs half of a
// reload: a new threshold or policy with the old devices, or the reverse.
type generation struct {
	specs map[string]ResourceSpec
	topo  *Topology
	// reload counts the specs published: a plan compiled under another
	// count was compiled from other specs.
	reload uint64
}

// Topology is who uses what, as discovery last saw it.
type Topology struct {
	// Resources by name: the devices that make up each, and which consumer
	// uses which of them.
	Resources map[string]ResourceView
	// Unmapped are the configured resources discovery could not map, by
	// name, with the reason: they control nothing until a later round
	// maps them, and status, metrics and the log say so.
	Unmapped map[string]string
	// Sources names the target software discovery read ("tgt", "lio",
	// "nvmet"; with source auto, what it found), for the log and status.
	Sources []string
	// Unthrottled are the TCP ports the target exports on that the agent
	// does not throttle or sample (not iscsi_port), sorted: their hosts'
	// traffic goes undelayed and unmeasured, so status, metrics, doctor
	// and the log say so.
	Unthrottled []uint16
}

// unmap records that resource name maps to nothing, and why.
func (t *Topology) unmap(name, why string) {
	if t.Unmapped == nil {
		t.Unmapped = map[string]string{}
	}
	t.Unmapped[name] = why
}

// ResourceView is one resource's devices and consumers.
type ResourceView struct {
	Devices   []string
	Consumers map[netip.Addr][]string // consumer → its devices on this resource
}

// ResourceSpec is a resource's policy, from config.
type ResourceSpec struct {
	Name         string
	Threshold    time.Duration
	Important    map[netip.Addr]bool // never throttled
	Throttleable map[netip.Addr]bool // always eligible
	// ProtectImportantOnly: the indicator is the read wait of the
	// important consumers' devices only (policy important-sets).
	ProtectImportantOnly bool
	NewController        func() Controller
	NewSmoother          func() Smoother
	// NewPolicy builds the resource's policy (nil: read-over-write, or
	// important-sets with ProtectImportantOnly).
	NewPolicy func() Policy
	// TailObjective: the threshold bounds the 95th percentile of the
	// per-interval read wait, not its smoothed value (objective.go).
	TailObjective bool
	// AutoThreshold: threshold: auto, learned from Threshold on
	// (autothreshold.go); NewControllerAt builds the controller for a
	// learned one (nil: auto is off).
	AutoThreshold   bool
	NewControllerAt func(threshold time.Duration) Controller
}

// newPolicy is the spec's policy, defaulting as NewPolicy says.
func (s ResourceSpec) newPolicy() Policy {
	switch {
	case s.NewPolicy != nil:
		return s.NewPolicy()
	case s.ProtectImportantOnly:
		return ImportantSets()
	}
	return ReadOverWrite()
}

// LoopConfig holds what all resource loops share.
type LoopConfig struct {
	Interval  time.Duration
	DelayStep time.Duration
	MaxDelay  time.Duration
	// WriteBps is the write-rate EWMA above which a consumer becomes
	// throttleable (thesis 4.5.1).
	WriteBps float64
	// NewRateSmoother smooths per-consumer write rates.
	NewRateSmoother func() Smoother
	// RiseStep bounds how fast a consumer's delay may grow: per tick at
	// most to 2 × its previous delay + RiseStep (decreases are immediate);
	// 0 means no bound. See riseLimit.
	RiseStep time.Duration
	// Onset preloads each resource's controller at the first sample of a
	// write surge with the output that held it last time (control,
	// onset.go).
	Onset bool
	// IdleHold is how long a slowed consumer that stops moving data keeps
	// its delays (hold.go); 0 releases it with the policy.
	IdleHold time.Duration
	// RateLeverSteps extends the controller's range past MaxDelay by this
	// many steps of write-rate caps on the heaviest writers (lever.go); 0
	// keeps the delay the only lever. The backend must cap write rates.
	RateLeverSteps int
	// BulkQueue is the queue at which a consumer saturates a resource in
	// any direction (saturation.go; 0: only the thesis' writers), and
	// Cost the model that prices its I/O per direction.
	BulkQueue float64
	ReadBps   float64
	Cost      cost.Model
}

// onsetHold is how many ticks a feed-forward preload is kept from the
// release rule: the surge reaches the reader's smoothed wait two or
// three samples after the writers' bytes reach the target.
const onsetHold = 3

// onsetMemoryAlpha weights each loaded sample in the remembered output:
// about the last second and a half of regulation at 100 ms.
const onsetMemoryAlpha = 0.1

// retarget hands a running loop to a controller built from a reloaded
// spec (a new threshold from SIGHUP or a cluster policy): the new one
// starts at the old one's step (control.PID's Preset), so the change moves
// the setpoint without a bump. A controller that cannot be preset or read
// is kept, so its loop never jumps to zero.
func retarget(old, fresh Controller) Controller {
	o, ok1 := old.(interface{ Output() int })
	p, ok2 := fresh.(interface{ Preset(int) })
	if !ok1 || !ok2 {
		return old
	}
	p.Preset(o.Output())
	return fresh
}

// preloader is a controller that takes a feed-forward (control.PID).
type preloader interface {
	Preload(level float64, hold int) int
}

// integralHolder is a controller whose integral can be held for a tick
// (control.PID): while the rise limit holds the settings below what the
// controller asked, its error is the limit's lag, not a shortfall.
type integralHolder interface {
	HoldIntegral()
}

// Loops runs every resource's pipeline, one synchronous tick (Step) at
// a time.
type Loops struct {
	cfg     LoopConfig
	sampler Sampler
	rates   RateSampler
	t       throttle.Throttle
	log     *slog.Logger
	gen     atomic.Pointer[generation]
	genMu   sync.Mutex // one swap at a time
	mu      sync.Mutex
	status  map[string]*ResourceStatus // each resource's, its resourceState's pub
	onTick  func(time.Duration)
	// states is what each resource remembers between ticks, and act
	// what the backend was given (Step).
	states map[string]*resourceState
	act    actuator
	// order is the generation's resources, sorted (regenerate); wishes
	// the tick's per resource, an array reused every tick.
	order struct {
		g   *generation
		res []genResource
	}
	wishes []map[netip.Addr]throttle.Setting
	// lay is the sampled devices' layout, kept across ticks (sample).
	lay tickLayout
	// applyErrs counts the batches the backend refused (apply): each is
	// retried, so only a count tells a one-off from a backend that has
	// stopped taking changes.
	applyErrs atomic.Uint64
	// events is the history of whom the resources slowed (events.go).
	events eventLog
}

// genResource is one resource of a generation, in Step's order.
type genResource struct {
	name   string
	spec   ResourceSpec
	view   ResourceView
	mapped bool // in the topology: view is its
	rs     *resourceState
}

// NewLoops prepares the loops; Run or Step runs them.
func NewLoops(cfg LoopConfig, s Sampler, t throttle.Throttle, log *slog.Logger) *Loops {
	l := &Loops{cfg: cfg, sampler: s, t: t, log: log, status: map[string]*ResourceStatus{}, states: map[string]*resourceState{}, act: newActuator()}
	l.gen.Store(&generation{specs: map[string]ResourceSpec{}, topo: &Topology{Resources: map[string]ResourceView{}}})
	return l
}

// UseRates makes consumers' rates come from r instead of their devices.
func (l *Loops) UseRates(r RateSampler) { l.rates = r }

// SetTopology publishes what discovery found; the next tick runs on it.
func (l *Loops) SetTopology(t *Topology) { l.swap(nil, t) }

// SetSpecs replaces the resources' policies (config reload).
func (l *Loops) SetSpecs(specs map[string]ResourceSpec) { l.swap(specs, nil) }

// swap publishes a new generation with specs and topo, each nil for the
// current one's: a reload passes both, and the next tick picks up both.
func (l *Loops) swap(specs map[string]ResourceSpec, topo *Topology) {
	l.genMu.Lock()
	defer l.genMu.Unlock()
	g := *l.gen.Load()
	if specs != nil {
		g.specs, g.reload = specs, g.reload+1
	}
	if topo != nil {
		g.topo = topo
	}
	l.gen.Store(&g)
}

// OnTick registers a callback with each tick's duration (metrics).
func (l *Loops) OnTick(f func(time.Duration)) { l.onTick = f }

// ApplyErrors is how many batches of throttle changes the backend refused.
func (l *Loops) ApplyErrors() uint64 { return l.applyErrs.Load() }

// Status returns a copy of every resource's status, sorted by name.
func (l *Loops) Status() []ResourceStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]ResourceStatus, 0, len(l.status))
	for _, p := range l.status {
		// publish rewrites the slices in place next tick.
		s := *p
		s.Consumers, s.Throttleable = slices.Clone(s.Consumers), slices.Clone(s.Throttleable)
		out = append(out, s)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out
}

// Run runs Step every interval until ctx ends, then clears every
// throttle it applied. A tick that overruns the interval delays the next
// one (the ticker drops what it missed); ticks never overlap.
func (l *Loops) Run(ctx context.Context) error {
	tick := time.NewTicker(l.cfg.Interval)
	defer tick.Stop()
	l.run(ctx, tick.C, time.Now)
	return nil
}

// run is Run on a given tick source and clock (tests drive both).
func (l *Loops) run(ctx context.Context, ticks <-chan time.Time, now func() time.Time) {
	defer l.Release()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		start := time.Now()
		if err := l.Step(now()); err != nil {
			l.log.Error("sampling diskstats", "err", err)
			continue
		}
		if l.onTick != nil {
			l.onTick(time.Since(start))
		}
	}
}

// resourceState is what one resource's pipeline remembers between ticks.
type resourceState struct {
	ctrl   Controller
	policy Policy
	in     PolicyInput // reused every tick: no per-tick slice of consumers
	ind    Smoother
	tail   *tailEstimate // objective p95 only
	onset  *control.OnsetDetector
	mem    *control.Memory
	floor  floorEstimate
	// last is the latest surge for status (noteOnset), onsetFrom the
	// controller's output before it and prevStep last tick's output.
	last                *OnsetStatus
	onsetFrom, prevStep int
	lever               rateLever
	// slowed is last tick's throttleable set (IndicatorUnthrottled, and
	// the onset detector's signal).
	slowed map[netip.Addr]bool
	// slowedK is slowed by consumer index of plan slowedAt.
	slowedK  []bool
	slowedAt *plan
	plan     *plan
	prev     []sample.Counters // per plan device; Device "" = none yet
	// at is each plan device's index in a Snapshotter's slice (-1: not
	// in it), for plan atPlan and layout atLayout.
	at       []int
	atPlan   *plan
	atLayout uint64
	// devs, sts and thr are the tick's intervals, consumer rows and
	// throttleable names, their arrays reused every tick.
	devs devIntervals
	sts  []ConsumerStatus
	thr  []string
	// set is the tick's settings by consumer index (dense).
	set []throttle.Setting
	// pub is the resource's published status (Loops.status), written
	// under Loops.mu.
	pub *ResourceStatus
	// asked is what this resource asks for each consumer (non-zero
	// settings only), after the rise limit: this tick's wishes, which
	// Step merges with the other resources', and the base of the next
	// tick's limit.
	asked, spare map[netip.Addr]throttle.Setting
	// limited: last tick's rise limit held a setting below the policy's;
	// changed: this tick's asked differs from last tick's.
	limited, changed bool
	// held are the delays idle consumers keep (hold.go).
	held holds
	// auto is threshold: auto's learner (nil: a set threshold).
	auto *autoState
	// io are the counters the metrics export (iototals.go).
	io ioCounts
	// ev is whom the resource slowed last tick, for events.
	ev eventTracker
}

// riseLimit bounds a delay's growth in one tick to 2·prev + step. Linux
// sends a tail-loss probe when no ACK comes within 2·srtt + 2 ms
// (TCP_TIMEOUT_MIN_US; older kernels add 2 jiffies) while more than one
// segment is in flight; srtt follows the delay within a tick (hundreds
// of ACKs at 1/8 gain each), so a delay that at most doubles plus less
// than 2 ms keeps every ACK inside the probe timeout, where a jump from
// ~0 to 12 ms made every throttled connection probe once (spurious,
// DSACKed). Decreases are not limited: ACKs arriving early never fire a
// timer.
func riseLimit(prev, want, step time.Duration) time.Duration {
	if step <= 0 || want <= prev {
		return want
	}
	return min(want, 2*prev+step)
}

// readRiseStep is the rise limit's step for read delays when delay_rise
// is not set. A read delay holds the target's data segments, several in
// flight, so the target's own probe timer (2·srtt + 2 ms) runs on them:
// a read delay set at once (0 → 8.5 ms in one tick, the backup's onsets
// at 20 ms) outran it at every onset. The kernel held most of those
// probes back because the segment was still queued on the host
// (TCPSpuriousRtxHostQueues: 16–27 per onset at 15 ms, 2–9 at 20 ms,
// read-backup s1-corr-f879221 tcp-*.csv), but one to three per phase got
// out and were DSACKed. Rising as 2·prev + 1 ms per tick stays inside the
// timer (the backup's connections carry dozens of ACKs per tick, so
// their srtt follows the delay within one) and reaches 8.5 ms in four
// ticks (1, 3, 7, 8.5 ms). Write delays on replies need no such limit: a reply is one
// segment, whose probe timer has 200 ms more (docs/architecture.md).
// Except on a consumer that reads as well (mixed I/O): the backends
// cannot tell its replies from its data, so they hold every segment but
// pure ACKs for the larger of its two delays, and a write
// delay set at once carried its data past the read's limit (mixed
// s1-r1-7bb651b at 15 ms: 0 → 42.5 ms in one tick, 14–19 host-queue
// skips at each onset; the phase had two spurious retransmissions where
// agent off had none). There the write delay rises under the same
// limit.
const readRiseStep = time.Millisecond

// Step runs one tick at the caller's time now: sample once, run every
// resource's stages in name order (runs are reproducible) on the
// generation loaded once at the start, merge their wishes and send the
// backend one batch of what changed. Run calls it on its ticker; the
// simulator and benchmarks call it on a virtual clock. A resource a
// reload removed is dropped and its throttles released in the same
// batch. An error is diskstats' and leaves the tick out; a TCP_INFO
// error only costs the consumers their wire rates for the tick (device
// rates stand in), as one failed sock_diag dump must not stop control.
func (l *Loops) Step(now time.Time) error {
	g := l.gen.Load()
	dirty := !l.act.clean // a batch to retry
	if l.order.g != g {
		l.regenerate(g)
		dirty = true // a resource may have gone, and its wishes with it
	}
	td, err := l.sample()
	if err != nil {
		return err
	}
	if l.rates != nil {
		if td.rates, err = l.rates.Sample(); err != nil {
			l.log.Error("sampling TCP_INFO", "err", err)
		}
	}
	wishes := l.wishes[:0]
	for i := range l.order.res {
		r := &l.order.res[i]
		l.step(r, g, td, now)
		wishes = append(wishes, r.rs.asked)
		dirty = dirty || r.rs.changed
	}
	l.wishes = wishes
	if dirty { // else merging would give what the backend holds
		l.apply(&l.act, merge(l.act.spare, wishes))
	}
	return nil
}

// regenerate drops the states of resources g's specs no longer have
// and lists g's resources, sorted, with their specs and states: once per
// generation, not by name every tick.
func (l *Loops) regenerate(g *generation) {
	for name := range l.states {
		if _, ok := g.specs[name]; !ok {
			delete(l.states, name)
			l.mu.Lock()
			delete(l.status, name)
			l.mu.Unlock()
		}
	}
	l.order.g, l.order.res = g, l.order.res[:0]
	for _, name := range slices.Sorted(maps.Keys(g.specs)) {
		rs := l.states[name]
		if rs == nil {
			rs = &resourceState{}
			l.states[name] = rs
		}
		view, mapped := g.topo.Resources[name]
		l.order.res = append(l.order.res, genResource{name: name, spec: g.specs[name], view: view, mapped: mapped, rs: rs})
	}
}

// Release clears every throttle the ticks applied (the end of Run, or
// of a simulated run).
func (l *Loops) Release() {
	l.apply(&l.act, nil)
	l.act.clean = false // the next tick's wishes are not what the backend holds
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
