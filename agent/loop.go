package agent

import (
	"context"
	"log/slog"
	"net/netip"
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

// tickData is what every resource loop gets each tick.
type tickData struct {
	counters map[string]sample.Counters
	rates    map[netip.Addr]sample.Rate // nil: use device rates
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

// Loops runs one goroutine per resource plus a sampler and an actuator.
type Loops struct {
	cfg     LoopConfig
	sampler Sampler
	rates   RateSampler
	t       throttle.Throttle
	log     *slog.Logger
	topo    atomic.Pointer[Topology]
	specs   atomic.Pointer[map[string]ResourceSpec]
	mu      sync.Mutex
	status  map[string]ResourceStatus
	onTick  func(time.Duration)
	sync    *stepper // Step's state; nil until the first Step
	// applyErrs counts the batches the backend refused (apply): each is
	// retried, so only a count tells a one-off from a backend that has
	// stopped taking changes.
	applyErrs atomic.Uint64
	// events is the history of whom the resources slowed (events.go).
	events eventLog
}

// NewLoops prepares the loops; Run starts them.
func NewLoops(cfg LoopConfig, s Sampler, t throttle.Throttle, log *slog.Logger) *Loops {
	l := &Loops{cfg: cfg, sampler: s, t: t, log: log, status: map[string]ResourceStatus{}}
	l.topo.Store(&Topology{Resources: map[string]ResourceView{}})
	empty := map[string]ResourceSpec{}
	l.specs.Store(&empty)
	return l
}

// UseRates makes consumers' rates come from r instead of their devices.
func (l *Loops) UseRates(r RateSampler) { l.rates = r }

// SetTopology publishes what discovery found; loops pick it up next tick.
func (l *Loops) SetTopology(t *Topology) { l.topo.Store(t) }

// SetSpecs replaces the resources' policies (config reload).
func (l *Loops) SetSpecs(specs map[string]ResourceSpec) { l.specs.Store(&specs) }

// OnTick registers a callback with each tick's duration (metrics).
func (l *Loops) OnTick(f func(time.Duration)) { l.onTick = f }

// ApplyErrors is how many batches of throttle changes the backend refused.
func (l *Loops) ApplyErrors() uint64 { return l.applyErrs.Load() }

// Status returns a copy of every resource's status, sorted by name.
func (l *Loops) Status() []ResourceStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]ResourceStatus, 0, len(l.status))
	for _, s := range l.status {
		out = append(out, s)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out
}

type desire struct {
	resource string
	delays   map[netip.Addr]time.Duration // write delay per consumer
	// other holds settings beyond a plain write delay (read delays, rate
	// caps) that policies other than read-over-write ask for.
	other map[netip.Addr]throttle.Setting
}

// Run samples every interval, feeds each resource's goroutine and applies
// the merged result, until ctx ends. On return every throttle it applied
// is cleared.
func (l *Loops) Run(ctx context.Context) error {
	desires := make(chan desire, 64)
	loops := map[string]chan tickData{}
	var wg sync.WaitGroup
	startLoop := func(name string) chan tickData {
		ch := make(chan tickData, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.resourceLoop(ctx, name, ch, desires)
		}()
		return ch
	}
	actDone := make(chan struct{})
	go func() {
		defer close(actDone)
		l.actuate(desires)
	}()
	tick := time.NewTicker(l.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			for _, ch := range loops {
				close(ch)
			}
			wg.Wait()
			close(desires)
			<-actDone
			return nil
		case <-tick.C:
		}
		start := time.Now()
		specs := *l.specs.Load()
		for name := range specs {
			if loops[name] == nil {
				loops[name] = startLoop(name)
			}
		}
		for name, ch := range loops {
			if _, ok := specs[name]; !ok {
				close(ch) // resource removed by a reload
				delete(loops, name)
			}
		}
		counters, err := l.sampler.Read()
		if err != nil {
			l.log.Error("sampling diskstats", "err", err)
			continue
		}
		td := tickData{counters: counters}
		if l.rates != nil {
			if td.rates, err = l.rates.Sample(); err != nil {
				l.log.Error("sampling TCP_INFO", "err", err)
			}
		}
		for _, ch := range loops {
			select {
			case ch <- td:
			default: // the loop is still busy with the last tick: it gets the next
			}
		}
		d := time.Since(start)
		if l.onTick != nil {
			l.onTick(d)
		}
	}
}

// resourceLoop is one resource's pipeline in real time: it runs step on
// every tick it is handed and passes the result to the actuator.
func (l *Loops) resourceLoop(ctx context.Context, name string, in <-chan tickData, out chan<- desire) {
	rs := &resourceState{}
	defer func() { out <- desire{resource: name} }() // release this resource's throttles
	for td := range in {
		spec, ok := (*l.specs.Load())[name]
		if !ok {
			return
		}
		d := l.step(rs, name, spec, l.topo.Load(), l.specs.Load(), td, time.Now())
		select {
		case out <- d:
		case <-ctx.Done():
			return
		}
	}
}

// resourceState is what one resource's pipeline remembers between ticks.
// It is owned by one caller at a time (a resourceLoop goroutine, or Step).
type resourceState struct {
	ctrl   Controller
	policy Policy
	in     PolicyInput // reused every tick: no per-tick slice of consumers
	ind    Smoother
	tail   *tailEstimate // objective p95 only
	onset  *control.OnsetDetector
	mem    *control.Memory
	floor  floorEstimate
	lever  rateLever
	rates  map[netip.Addr]Smoother
	loads  map[netip.Addr]*loadEstimate
	// slowed is last tick's throttleable set (IndicatorUnthrottled, and
	// the onset detector's signal).
	slowed map[netip.Addr]bool
	plan   *plan
	prev   []sample.Counters // per plan device; Device "" = none yet
	// asked is what this resource asked for each consumer last tick, after
	// the rise limit: the base of this tick's limit.
	asked, spare map[netip.Addr]throttle.Setting
	// limited: last tick's rise limit held a setting below the policy's.
	limited bool
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

// stepper is the synchronous driver's state (see Step).
type stepper struct {
	states map[string]*resourceState
	act    *actuator
}

// Step runs one tick synchronously at the caller's time now: sample, every
// resource's step (in name order, so runs are reproducible), merge and
// apply. It is Run's pipeline without goroutines, tickers or wall-clock
// reads, for the simulator and benchmarks, which drive a virtual clock.
// Do not mix Step and Run on the same Loops.
func (l *Loops) Step(now time.Time) error {
	if l.sync == nil {
		l.sync = &stepper{states: map[string]*resourceState{}, act: newActuator()}
	}
	sp := l.sync
	specsP := l.specs.Load()
	specs := *specsP
	for name := range sp.states {
		if _, ok := specs[name]; !ok {
			delete(sp.states, name) // removed by a reload: release its throttles
			sp.act.put(desire{resource: name})
			l.mu.Lock()
			delete(l.status, name)
			l.mu.Unlock()
		}
	}
	counters, err := l.sampler.Read()
	if err != nil {
		return err
	}
	td := tickData{counters: counters}
	if l.rates != nil {
		if td.rates, err = l.rates.Sample(); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(specs))
	for name := range specs {
		names = append(names, name)
	}
	sort.Strings(names)
	topo := l.topo.Load()
	for _, name := range names {
		rs := sp.states[name]
		if rs == nil {
			rs = &resourceState{}
			sp.states[name] = rs
		}
		sp.act.put(l.step(rs, name, specs[name], topo, specsP, td, now))
	}
	l.apply(sp.act)
	return nil
}

// Release clears every throttle Step applied (the end of a simulated run).
func (l *Loops) Release() {
	if l.sync == nil {
		return
	}
	l.sync.act.releaseAll()
	l.apply(l.sync.act)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
