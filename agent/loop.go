package agent

import (
	"context"
	"log/slog"
	"math"
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

// ResourceStatus is what a resource loop last did, for status and metrics.
type ResourceStatus struct {
	Name        string   `json:"name"`
	Devices     []string `json:"devices"`
	IndicatorMs float64  `json:"indicator_ms"`
	RawWaitMs   float64  `json:"raw_wait_ms"`
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
	// Onsets counts the write surges the onset detector found;
	// FeedForwardMs is the delay it would preload at the next (0 until
	// the resource has been regulated under load).
	Onsets        uint64           `json:"onsets"`
	FeedForwardMs float64          `json:"feedforward_ms"`
	ThresholdMs   float64          `json:"threshold_ms"`
	Step          int              `json:"step"`
	Delay         time.Duration    `json:"delay_ns"`
	Throttleable  []string         `json:"throttleable"`
	Consumers     []ConsumerStatus `json:"consumers"`
	Policy        string           `json:"policy,omitempty"`
	// Classes is the slo-classes policy's per-class accounting.
	Classes []ClassStatus `json:"classes,omitempty"`
	// Network is the network saturation indicator and Reservations the
	// per-reservation accounting (reservations policy).
	Network      *NetStatus          `json:"network,omitempty"`
	Reservations []ReservationStatus `json:"reservations,omitempty"`
	Updated      time.Time           `json:"updated"`
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

// plan is a resource's view and policy compiled for the per-tick loop:
// device indexes instead of name lookups, consumers already sorted by
// address string (as status lists them), their strings made once. It is
// rebuilt only when discovery publishes a new topology or a reload new
// specs, so a tick at 1,000 resources × 10,000 consumers does no sorting
// and few map lookups.
type plan struct {
	topo     *Topology
	specs    *map[string]ResourceSpec
	devices  []string
	measured []int // devices whose read wait is the indicator
	// users are the consumers (indexes) of each device.
	users     [][]int
	consumers []planConsumer
	static    []planConsumer // static throttleable consumers without devices in the view
}

// matches reports whether the plan was compiled from a view equal to v.
func (p *plan) matches(v ResourceView) bool {
	if !slices.Equal(p.devices, v.Devices) || len(p.consumers) != len(v.Consumers) {
		return false
	}
	for _, pc := range p.consumers {
		devs, ok := v.Consumers[pc.addr]
		if !ok || !slices.Equal(devs, pc.devNames) {
			return false
		}
	}
	return true
}

type planConsumer struct {
	addr      netip.Addr
	name      string
	devNames  []string
	devs      []int
	important bool
	static    bool // in spec.Throttleable
	rate      Smoother
	load      *loadEstimate
}

func (l *Loops) compile(rs *resourceState, spec ResourceSpec, view ResourceView, topo *Topology, specs *map[string]ResourceSpec) {
	old := rs.plan
	p := &plan{topo: topo, specs: specs, devices: view.Devices}
	idx := make(map[string]int, len(view.Devices))
	for i, d := range view.Devices {
		if _, dup := idx[d]; !dup {
			idx[d] = i
		}
	}
	for _, d := range spec.measuredDevices(view) {
		if i, ok := idx[d]; ok {
			p.measured = append(p.measured, i)
		}
	}
	// measuredDevices may come from map order; a fixed summing order keeps
	// the indicator bit-for-bit reproducible (the simulator relies on it).
	slices.Sort(p.measured)
	for c, devs := range view.Consumers {
		pc := planConsumer{addr: c, name: c.String(), devNames: devs, important: spec.Important[c], static: spec.Throttleable[c]}
		for _, d := range devs {
			if i, ok := idx[d]; ok {
				pc.devs = append(pc.devs, i)
			} else {
				pc.devs = append(pc.devs, -1) // a device outside the resource: no rate from it
			}
		}
		pc.rate = rs.rates[c]
		if pc.rate == nil {
			pc.rate = l.cfg.NewRateSmoother()
			rs.rates[c] = pc.rate
		}
		pc.load = rs.loads[c]
		if pc.load == nil {
			pc.load = &loadEstimate{}
			rs.loads[c] = pc.load
		}
		p.consumers = append(p.consumers, pc)
	}
	sort.Slice(p.consumers, func(i, k int) bool { return p.consumers[i].name < p.consumers[k].name })
	p.users = make([][]int, len(p.devices))
	for k, pc := range p.consumers {
		for _, i := range pc.devs {
			if i >= 0 {
				p.users[i] = append(p.users[i], k)
			}
		}
	}
	for c := range spec.Throttleable {
		if _, seen := view.Consumers[c]; !seen && !spec.Important[c] {
			p.static = append(p.static, planConsumer{addr: c, name: c.String()})
		}
	}
	for c := range rs.rates {
		if _, ok := view.Consumers[c]; !ok {
			delete(rs.rates, c) // a consumer that left: forget its history
			delete(rs.loads, c)
		}
	}
	// Carry the last counters over to the new plan by device name, so a
	// rediscovered topology costs no interval.
	prev := make([]sample.Counters, len(p.devices))
	if old != nil {
		for i, d := range old.devices {
			if k, ok := idx[d]; ok {
				prev[k] = rs.prev[i]
			}
		}
	}
	rs.plan, rs.prev = p, prev
}

// step is one resource's pipeline for one tick: indicator → controller →
// delay for the throttleable set. It is the same code in real time
// (resourceLoop) and under a virtual clock (Step), so the simulator
// exercises exactly what the agent runs. It publishes the status and
// returns the resource's wishes.
func (l *Loops) step(rs *resourceState, name string, spec ResourceSpec, topo *Topology, specs *map[string]ResourceSpec, td tickData, now time.Time) desire {
	view := topo.Resources[name]
	if rs.ctrl == nil {
		rs.ctrl, rs.ind = spec.NewController(), spec.NewSmoother()
		rs.rates, rs.loads = map[netip.Addr]Smoother{}, map[netip.Addr]*loadEstimate{}
		if _, ok := rs.ctrl.(preloader); ok && (l.cfg.Onset || l.cfg.RateLeverSteps > 0) {
			rs.onset = control.NewOnsetDetector(control.DefaultOnsetConfig(l.cfg.WriteBps))
			rs.mem = control.NewMemory(onsetMemoryAlpha)
		}
	}
	switch {
	case rs.plan == nil || rs.plan.specs != specs:
		// A reload may change the policy; its state (credits) restarts.
		rs.policy = spec.newPolicy()
		if rs.plan != nil && (*rs.plan.specs)[name].Threshold != spec.Threshold {
			rs.ctrl = retarget(rs.ctrl, spec.NewController())
		}
		l.compile(rs, spec, view, topo, specs)
	case rs.plan.topo != topo:
		// Discovery publishes a fresh topology every round; most rounds
		// change nothing for most resources, and comparing is far cheaper
		// than compiling.
		if rs.plan.matches(view) {
			rs.plan.topo = topo
		} else {
			l.compile(rs, spec, view, topo, specs)
		}
	}
	p := rs.plan
	st := ResourceStatus{Name: name, Devices: view.Devices, ThresholdMs: ms(spec.Threshold), RawWaitMs: math.NaN(), Updated: now}
	ivs := make([]sample.Interval, len(p.devices))
	okIv := make([]bool, len(p.devices))
	for i, d := range p.devices {
		c, ok := td.counters[d]
		if !ok {
			continue
		}
		if rs.prev[i].Device != "" {
			if iv, err := sample.Diff(rs.prev[i], c); err == nil {
				ivs[i], okIv[i] = iv, true
			}
		}
		rs.prev[i] = c
	}
	// Indicator: read wait over the devices that had reads (4.5.2).
	var slowed map[netip.Addr]bool
	if rs.policy.Indicator() == IndicatorUnthrottled {
		slowed = rs.slowed
	}
	ticks, reads := indicatorReads(p, ivs, okIv, slowed)
	q := 1.0
	if reads > 0 {
		st.RawWaitMs = ticks / reads
		if spec.TailObjective {
			if rs.tail == nil {
				rs.tail = newTailEstimate()
			}
			if prev, ok := rs.ind.Value(); ok {
				q = rs.tail.add(st.RawWaitMs, prev)
			}
		}
		rs.ind.Update(st.RawWaitMs)
	}
	if rs.tail != nil {
		q = rs.tail.q
	}
	if f, ok := rs.floor.value(); ok {
		// The tail factor never aims the controller below the wait
		// reads have with no writer at all (objective.go).
		q = min(q, max(1, st.ThresholdMs/(floorMargin*f)))
		st.FloorMs, st.Unreachable = f, st.ThresholdMs <= unreachableMargin*f
	}
	st.IndicatorMs = math.NaN()
	st.SetpointMs = st.ThresholdMs / q
	// The policy names who is slowed and how (read-over-write: writers
	// above the rate threshold, 4.5.1, plus the static ones, never the
	// important ones). Its input is gathered first, since the writers'
	// rates are also the onset detector's signal; the controller's
	// output is filled in before the policy decides.
	in := &rs.in
	*in = PolicyInput{Now: now, Interval: l.cfg.Interval, ThresholdMs: st.ThresholdMs,
		DelayStep: l.cfg.DelayStep, MaxDelay: l.cfg.MaxDelay, WriteBps: l.cfg.WriteBps, BulkQueue: l.cfg.BulkQueue, ReadBps: l.cfg.ReadBps, Consumers: in.Consumers[:0],
		settingsBuf: in.settingsBuf, thrBuf: in.thrBuf}
	st.Consumers = make([]ConsumerStatus, 0, len(p.consumers))
	for _, pc := range p.consumers {
		var rb, wb float64
		ci := ConsumerInput{Addr: pc.addr, HasDevices: true, Important: pc.important, Static: pc.static}
		var rTicks, wTicks, nr, nw, secs float64
		for _, i := range pc.devs {
			if i >= 0 && okIv[i] {
				iv := ivs[i]
				rb += iv.ReadBps
				wb += iv.WriteBps
				nr += float64(iv.Reads)
				nw += float64(iv.Writes)
				if iv.Reads > 0 {
					rTicks += iv.ReadWaitMs * float64(iv.Reads)
				}
				if iv.Writes > 0 {
					wTicks += iv.WriteWaitMs * float64(iv.Writes)
				}
				secs = max(secs, iv.Seconds)
			}
		}
		ci.ReadWaitMs, ci.WriteWaitMs, ci.QueueMs, ci.SRTTMs = math.NaN(), math.NaN(), math.NaN(), math.NaN()
		// The queue and load are the devices' (the rates below may come
		// from the wire instead).
		var devLoad cost.Load
		var devQueue float64
		if secs > 0 {
			devLoad, devQueue = l.cfg.Cost.Of(nr/secs, rb, nw/secs, wb), (rTicks+wTicks)/1e3/secs
		}
		if r, ok := td.rates[pc.addr]; ok {
			rb, wb = r.ReadBps, r.WriteBps
			if r.MinRTT > 0 {
				ci.QueueMs, ci.SRTTMs = ms(r.QueueDelay), ms(r.SRTT)
			}
			ci.DeliveryBps, ci.InFlight = r.DeliveryBps, r.InFlight
		}
		if nr > 0 {
			ci.ReadWaitMs = rTicks / nr
		}
		if nw > 0 {
			ci.WriteWaitMs = wTicks / nw
		}
		if secs > 0 {
			ci.ReadIOPS, ci.WriteIOPS = nr/secs, nw/secs
		}
		if secs > 0 {
			pc.load.update(l.cfg.Interval.Seconds(), devQueue, devLoad, rb)
		}
		ci.Queue, ci.Load, ci.ReadEWMA = pc.load.queue, pc.load.load, pc.load.readBps
		ew, _ := pc.rate.Update(wb)
		ci.ReadBps, ci.WriteBps, ci.WriteEWMA = rb, wb, ew
		in.Consumers = append(in.Consumers, ci)
		st.Consumers = append(st.Consumers, ConsumerStatus{Addr: pc.name, ReadBps: rb, WriteBps: wb, WriteEWMA: ew, Important: pc.important,
			Queue: ci.Queue, LoadRead: ci.Load.Read, LoadWrite: ci.Load.Write})
	}
	for _, pc := range p.static {
		in.Consumers = append(in.Consumers, ConsumerInput{Addr: pc.addr, Static: true, ReadWaitMs: math.NaN(), WriteWaitMs: math.NaN(),
			QueueMs: math.NaN(), SRTTMs: math.NaN()})
	}
	step := l.control(rs, &st, q)
	delay := min(time.Duration(step)*l.cfg.DelayStep, l.cfg.MaxDelay)
	st.Step, st.Delay = step, delay
	in.IndicatorMs, in.Output = st.IndicatorMs, delay
	out := rs.policy.Decide(in)
	st.Policy, st.Classes, st.Network, st.Reservations = rs.policy.Name(), out.Classes, out.Network, out.Reservations
	l.applyRateLever(rs, &st, in, out, step)
	if len(out.Throttleable) > 0 {
		st.Throttleable = make([]string, 0, len(out.Throttleable)+len(p.static))
	}
	in.thrBuf = out.Throttleable[:0] // keep the grown buffer
	if rs.slowed == nil {
		rs.slowed = map[netip.Addr]bool{}
	}
	clear(rs.slowed)
	for _, k := range out.Throttleable {
		rs.slowed[in.Consumers[k].Addr] = true
	}
	for _, k := range out.Throttleable {
		if k < len(p.consumers) {
			st.Throttleable = append(st.Throttleable, p.consumers[k].name)
		} else {
			st.Throttleable = append(st.Throttleable, p.static[k-len(p.consumers)].name)
		}
	}
	if len(p.static) > 0 {
		sort.Strings(st.Throttleable)
	}
	want := make(map[netip.Addr]time.Duration, len(out.Settings))
	var other map[netip.Addr]throttle.Setting
	// Two maps swapped every tick: last tick's asks and this tick's.
	asked := rs.asked
	if l.cfg.RiseStep > 0 {
		if rs.spare == nil {
			rs.spare = map[netip.Addr]throttle.Setting{}
		}
		rs.asked, rs.spare = rs.spare, asked
		clear(rs.asked)
	}
	for a, s := range out.Settings {
		if s.IsZero() {
			continue
		}
		if l.cfg.RiseStep > 0 {
			p := asked[a]
			s.WriteDelay = riseLimit(p.WriteDelay, s.WriteDelay, l.cfg.RiseStep)
			s.ReadDelay = riseLimit(p.ReadDelay, s.ReadDelay, l.cfg.RiseStep)
			out.Settings[a] = s // the policy's buffer, reused next tick: status shows what is asked
			rs.asked[a] = s
		}
		if s.ReadDelay == 0 && s.Rate == 0 && s.WriteRate == 0 {
			want[a] = s.WriteDelay
			continue
		}
		if other == nil {
			other = map[netip.Addr]throttle.Setting{}
		}
		other[a] = s
	}
	if len(out.Settings) > 0 {
		for k := range st.Consumers {
			if s, ok := out.Settings[in.Consumers[k].Addr]; ok && !s.IsZero() {
				st.Consumers[k].Throttled, st.Consumers[k].Setting = true, s
			}
		}
	}
	l.mu.Lock()
	l.status[name] = st
	l.mu.Unlock()
	return desire{resource: name, delays: want, other: other}
}

// control runs the resource's controller on this tick's indicator (× q,
// the tail objective's factor), with the onset feed-forward: the writers'
// aggregate rate this tick (rs.in, the policy's input) is the detector's
// signal, and the output of loaded ticks is what the memory learns.
func (l *Loops) control(rs *resourceState, st *ResourceStatus, q float64) int {
	fired := false
	if rs.onset != nil {
		w, n := l.interference(rs)
		fired = rs.onset.Update(w, n)
	}
	// No indicator yet (no read completed on the resource) still goes
	// through the controller, as NaN: a local PID holds its output, and a
	// cluster seam (package cluster) publishes the agent's writers and
	// follows the shared step. A target host that only serves writers
	// must still be throttled by the resource's leader.
	m := math.NaN()
	if v, ok := rs.ind.Value(); ok {
		st.IndicatorMs = v
		m = v * q
	}
	step := rs.ctrl.Update(m)
	if rs.onset == nil {
		return step
	}
	if !rs.onset.Loaded() {
		rs.floor.observe(st.RawWaitMs)
	}
	lvl, known := rs.mem.Level()
	switch {
	case !l.cfg.Onset:
	case fired && known:
		// Never into the write-cap range: a cap that appears at once
		// queues several of a writer's windows at a low rate, longer than
		// its TCP's retransmission timeout (lab, 10 ms with the lever:
		// 658 retransmissions, 8 RTOs). The PID walks there by itself.
		step = rs.ctrl.(preloader).Preload(min(lvl, float64(l.cfg.MaxDelay/l.cfg.DelayStep)), onsetHold)
	case rs.onset.Settled():
		rs.mem.Observe(float64(step))
	}
	st.Onsets = rs.onset.Fired()
	if known {
		st.FeedForwardMs = ms(time.Duration(lvl * float64(l.cfg.DelayStep)))
	}
	return step
}

// interference is the onset detector's signal: the interferers' aggregate
// rate and how many move more than throttleable_write_mb_s. Every
// consumer's writes count (the thesis' surge), and the reads of those
// that saturate the resource (last tick's throttleable set, or a queue or
// read rate at the marks of saturation.go) — not the protected reader's,
// whose own reads must not make an idle resource look loaded. Without
// the reads, a backup's resource looked idle to the detector: its floor
// (the wait "with no writer") was learnt under the backup, and the
// threshold was called unreachable.
func (l *Loops) interference(rs *resourceState) (bps float64, n int) {
	for _, c := range rs.in.Consumers {
		if c.Important {
			continue
		}
		x := c.WriteBps
		if rs.slowed[c.Addr] || (l.cfg.BulkQueue > 0 && c.Queue >= l.cfg.BulkQueue) || (l.cfg.ReadBps > 0 && c.ReadEWMA > l.cfg.ReadBps) {
			x += c.ReadBps
		}
		bps += x
		if x >= l.cfg.WriteBps && x > 0 {
			n++
		}
	}
	return bps, n
}

// applyRateLever adds write-rate caps to the policy's settings while the
// controller is past the delay range (lever.go). Only the policies whose
// settings are the controller's delay on the throttleable set take part:
// the others map the output to settings of their own.
func (l *Loops) applyRateLever(rs *resourceState, st *ResourceStatus, in *PolicyInput, out PolicyOutput, step int) {
	n := l.cfg.RateLeverSteps
	k := step - int(l.cfg.MaxDelay/l.cfg.DelayStep)
	name := rs.policy.Name()
	if n <= 0 || k < 0 || st.Unreachable || (name != "read-over-write" && name != "important-sets") {
		rs.lever.reset()
		return
	}
	writers := make([]netip.Addr, 0, len(out.Settings))
	for a, s := range out.Settings {
		if s.WriteDelay > 0 {
			writers = append(writers, a)
		}
	}
	ewma := make(map[netip.Addr]float64, len(writers))
	for _, c := range in.Consumers {
		if _, ok := out.Settings[c.Addr]; ok {
			ewma[c.Addr] = c.WriteEWMA
		}
	}
	rate := func(a netip.Addr) float64 { return ewma[a] }
	if k == 0 {
		rs.lever.reset()
		rs.lever.observeMax(writers, rate)
		return
	}
	st.RateLeverStep = k
	rs.lever.ramp = capRampPer(l.cfg.Interval)
	for a, c := range rs.lever.caps(k, n, writers, rate) {
		// A capped writer stays slowed even when its capped rate falls
		// below the policy's throttleable threshold: dropping it would
		// release it at full speed into the queue the cap just emptied.
		s := out.Settings[a]
		s.WriteDelay, s.WriteRate = in.Output, c
		out.Settings[a] = s
	}
}

// minCap is the tighter of two rate caps, 0 meaning none.
func minCap(a, b uint64) uint64 {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

func (s ResourceSpec) measuredDevices(v ResourceView) []string {
	if !s.ProtectImportantOnly && (s.NewPolicy == nil || s.NewPolicy().Indicator() != IndicatorImportant) {
		return v.Devices
	}
	var devs []string
	for c, ds := range v.Consumers {
		if s.Important[c] {
			devs = append(devs, ds...)
		}
	}
	return devs
}

// actuate merges every resource's wishes (a consumer on two saturated
// resources gets the larger delay) and applies only the differences, in
// one batch per change.
func (l *Loops) actuate(in <-chan desire) {
	a := newActuator()
	for d := range in {
		a.put(d)
		l.apply(a)
	}
	a.releaseAll()
	l.apply(a)
}

// actuator holds every resource's latest wishes and what was applied.
type actuator struct {
	per     map[string]desire
	applied map[netip.Addr]throttle.Setting
}

func newActuator() *actuator {
	return &actuator{per: map[string]desire{}, applied: map[netip.Addr]throttle.Setting{}}
}

// put records a resource's wishes; nil delays release the resource.
func (a *actuator) put(d desire) {
	if d.delays == nil {
		delete(a.per, d.resource)
	} else {
		a.per[d.resource] = d
	}
}

func (a *actuator) releaseAll() { clear(a.per) }

// diff merges the wishes (per consumer the largest delay of each kind
// wins, and the smallest non-zero rate cap) and returns the merged state
// and the batch that takes the applied state there.
func (a *actuator) diff() (merged map[netip.Addr]throttle.Setting, batch map[netip.Addr]throttle.Setting) {
	merged = make(map[netip.Addr]throttle.Setting, len(a.applied))
	for _, d := range a.per {
		for c, w := range d.delays {
			s := merged[c]
			s.WriteDelay = max(s.WriteDelay, w)
			merged[c] = s
		}
		for c, o := range d.other {
			s := merged[c]
			s.WriteDelay, s.ReadDelay = max(s.WriteDelay, o.WriteDelay), max(s.ReadDelay, o.ReadDelay)
			s.Rate, s.WriteRate = minCap(s.Rate, o.Rate), minCap(s.WriteRate, o.WriteRate)
			merged[c] = s
		}
	}
	batch = map[netip.Addr]throttle.Setting{}
	for c, s := range merged {
		if a.applied[c] != s {
			batch[c] = s
		}
	}
	for c := range a.applied {
		if _, ok := merged[c]; !ok {
			batch[c] = throttle.Setting{}
		}
	}
	return merged, batch
}

// apply sends the actuator's pending differences to the throttle. On error
// nothing is recorded as applied, so the next tick retries the whole diff.
func (l *Loops) apply(a *actuator) {
	merged, batch := a.diff()
	if len(batch) == 0 {
		return
	}
	if err := l.t.Set(batch); err != nil {
		l.log.Error("applying throttles", "err", err, "consumers", len(batch))
		return
	}
	a.applied = merged
}

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
