package agent

import (
	"math"
	"net/netip"
	"sort"
	"time"

	"github.com/sanqos/sanqos/control"
	"github.com/sanqos/sanqos/sample"
)

// One resource's tick, in stages. Each stage takes what the one before
// produced and returns what the next needs, so it can be tested alone on
// recorded inputs; what a stage keeps between ticks lives in
// resourceState. The order is the pipeline of the package docs:
//
//	sample    counters → per-device intervals (sampleDevices)
//	indicate  intervals → the protected reads' wait, its smoothed value,
//	          the p95 objective's tail factor and the floor (indicate)
//	measure   intervals + wire rates → each consumer's rates, waits,
//	          queue and load: the policy's input (measure, measure.go)
//	control   indicator → controller step, with the onset feed-forward;
//	          its integral held while the rise limit lags (control)
//	decide    step → the policy's settings, the write-cap hand-over and
//	          the throttleable set (decide)
//	shape     settings → the rise limit: the resource's wishes, which
//	          Step merges into the tick's one batch (shape, shape.go)
//	track     settings vs last tick's → events: whom it started or
//	          stopped slowing, and why (track, events_track.go)
//	publish   the status the API, metrics and cluster read (publish)

// step is one resource's pipeline for one tick, run by Step on the
// tick's generation g. It publishes the status and leaves the resource's
// wishes in rs.asked.
func (l *Loops) step(r *genResource, g *generation, td tickData, now time.Time) {
	rs, name, spec, view := r.rs, r.name, r.spec, r.view
	l.prepare(rs, spec, view, g)
	st := ResourceStatus{Name: name, Devices: view.Devices, ThresholdMs: ms(l.threshold(rs, spec)), Updated: now}
	if !r.mapped {
		st.Unmapped = g.topo.Unmapped[name]
		if st.Unmapped == "" {
			// The first round has not ended, or discovery fails (status'
			// discovery_error says why) and never mapped it.
			st.Unmapped = "not discovered yet"
		}
	}
	devs := rs.sampleDevices(td)
	ind := rs.indicate(spec.TailObjective, st.ThresholdMs, devs)
	st.RawWaitMs, st.FloorMs, st.Unreachable, st.SetpointMs = ind.rawMs, ind.floorMs, ind.unreachable, st.ThresholdMs/ind.q
	st.Consumers = l.measure(rs, devs, td.rates, now, st.ThresholdMs)
	rs.count(&st, devs, ind, td.rates, l.rates != nil)
	step := l.control(rs, &st, ind.q)
	l.learn(rs, name, &st, devs, now)
	out := l.decide(rs, &st, step)
	l.shape(rs, &out)
	l.track(rs, name, &st, now)
	l.publish(rs, name, &st)
}

// prepare builds a resource's state on its first tick and recompiles its
// plan when a reload or discovery changed what it steers by.
func (l *Loops) prepare(rs *resourceState, spec ResourceSpec, view ResourceView, g *generation) {
	if rs.ctrl == nil {
		rs.ctrl, rs.ind = spec.NewController(), spec.NewSmoother()
		rs.slowed = map[netip.Addr]bool{}
		// threshold: auto learns from the onset detector's loaded ticks
		// and the floor it keeps, with or without the feed-forward.
		if _, ok := rs.ctrl.(preloader); ok && (l.cfg.Onset || l.cfg.RateLeverSteps > 0 || spec.AutoThreshold) {
			rs.onset = control.NewOnsetDetector(control.DefaultOnsetConfig(l.cfg.WriteBps))
			rs.mem = control.NewMemory(onsetMemoryAlpha)
		}
	}
	switch {
	case rs.plan == nil || rs.plan.reload != g.reload:
		// A reload may change the policy; its state (credits) restarts.
		rs.policy = spec.newPolicy()
		if rs.plan != nil && rs.plan.threshold != spec.Threshold {
			rs.ctrl = retarget(rs.ctrl, spec.NewController())
		}
		l.compile(rs, spec, view, g)
	case rs.plan.topo != g.topo:
		// Discovery publishes a fresh topology every round; most rounds
		// change nothing for most resources, and comparing is far cheaper
		// than compiling.
		if rs.plan.matches(view) {
			rs.plan.topo = g.topo
		} else {
			l.compile(rs, spec, view, g)
		}
	}
}

// devIntervals are the plan's devices' intervals this tick; ok[i] is
// false where device i has no interval (no counters, or its first).
type devIntervals struct {
	iv []sample.Interval
	ok []bool
}

// sampleDevices is the sample stage: each plan device's interval since
// its last counters, which it keeps for the next tick.
func (rs *resourceState) sampleDevices(td tickData) devIntervals {
	p := rs.plan
	// Reused every tick: nothing keeps a tick's intervals past its step.
	d := devIntervals{iv: grow(rs.devs.iv, len(p.devices)), ok: grow(rs.devs.ok, len(p.devices))}
	clear(d.ok) // iv[i] is this tick's where ok[i]; every reader asks
	rs.devs = d
	if rs.atPlan != p || rs.atLayout != td.layout || rs.at == nil {
		rs.at, rs.atPlan, rs.atLayout = grow(rs.at, len(p.devices)), p, td.layout
		for i, name := range p.devices {
			if k, ok := td.idx[name]; ok {
				rs.at[i] = k
			} else {
				rs.at[i] = -1
			}
		}
	}
	var t0, t1 time.Time // the devices' times, most often the same all tick
	secs := 0.0
	for i, k := range rs.at {
		if k < 0 {
			continue
		}
		c, prev := &td.snap[k], &rs.prev[i]
		if prev.Device != "" {
			if prev.Time != t0 || c.Time != t1 {
				t0, t1, secs = prev.Time, c.Time, c.Time.Sub(prev.Time).Seconds()
			}
			d.ok[i] = sample.DiffSeconds(&d.iv[i], prev, c, secs) == nil
		}
		*prev = *c
	}
	return d
}

// indication is the indicate stage's result: the protected reads' wait
// this tick (NaN: none), the p95 objective's tail factor q (the
// controller is fed indicator × q), and the floor when one is known.
type indication struct {
	rawMs, q, floorMs float64
	unreachable       bool
	// reads and readTicks (ms) are the reads behind rawMs, which the
	// indicator's counters add up (iototals.go).
	reads, readTicks float64
}

// indicate is the indicate stage: the read wait over the devices the
// policy protects that had reads (4.5.2), fed to the smoother, and the
// tail factor, capped so the setpoint never falls under the floor.
func (rs *resourceState) indicate(tailObjective bool, thresholdMs float64, d devIntervals) indication {
	var slowed []bool
	if rs.policy.Indicator() == IndicatorUnthrottled && len(rs.slowed) > 0 {
		slowed = rs.slowedFlags()
	}
	ticks, reads := indicatorReads(rs.plan, d.iv, d.ok, slowed)
	ind := indication{rawMs: math.NaN(), q: 1, reads: reads, readTicks: ticks}
	if reads > 0 {
		ind.rawMs = ticks / reads
		if tailObjective {
			if rs.tail == nil {
				rs.tail = newTailEstimate()
			}
			if prev, ok := rs.ind.Value(); ok {
				rs.tail.add(ind.rawMs, prev)
			}
			if len(rs.slowed) > 0 {
				rs.tail.observe(ind.rawMs, thresholdMs)
			}
		}
		rs.ind.Update(ind.rawMs)
	}
	if rs.tail != nil {
		ind.q = rs.tail.factor()
	}
	if f, ok := rs.floor.value(); ok {
		// The tail factor never aims the controller below the wait
		// reads have with no writer at all (objective.go).
		ind.q = min(ind.q, max(1, thresholdMs/(floorMargin*f)))
		ind.floorMs, ind.unreachable = f, thresholdMs <= unreachableMargin*f
	}
	return ind
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
	if h, ok := rs.ctrl.(integralHolder); ok && rs.limited {
		h.HoldIntegral()
	}
	step := rs.ctrl.Update(m)
	if rs.onset == nil {
		return step
	}
	// The floor is the wait with no interferer: a tick is quiet for the
	// detector when its writes fall under throttleable_write_mb_s, which
	// slowed writers do between completions (LIO guest, 64 KiB writes at
	// max_delay: a tick with one write is quiet), while their writes
	// still hold the reads. Learnt then, the floor rose over the
	// threshold, which was called unreachable and the write-cap lever
	// stayed off. So nobody may be in last tick's throttleable set, and
	// a sample waits for floorDelay calm ticks after it (a load's first
	// ticks can look quiet too).
	rs.floor.tick(st.RawWaitMs, !rs.onset.Loaded() && len(rs.slowed) == 0)
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
	l.noteOnset(rs, st, fired, step)
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
	slowed := rs.slowedFlags()
	for k := range rs.in.Consumers {
		c := &rs.in.Consumers[k] // a row is 200 bytes: not copied
		if c.Important {
			continue
		}
		x := c.WriteBps
		if slowed[k] || saturates(c, l.cfg.BulkQueue, l.cfg.ReadBps) {
			x += c.ReadBps
		}
		bps += x
		if x >= l.cfg.WriteBps && x > 0 {
			n++
		}
	}
	return bps, n
}

// slowedFlags is rs.slowed by consumer index: as decide left it, or
// from the map where the plan changed since.
func (rs *resourceState) slowedFlags() []bool {
	if rs.slowedAt == rs.plan {
		return rs.slowedK
	}
	return marks(rs.plan, rs.slowed)
}

// decide is the decide stage: the controller's step as a delay, the
// policy's settings for it, the write caps past the delay's range, and
// the throttleable set (status, and next tick's indicator and onset
// signal).
func (l *Loops) decide(rs *resourceState, st *ResourceStatus, step int) PolicyOutput {
	p, in := rs.plan, &rs.in
	delay := min(time.Duration(step)*l.cfg.DelayStep, l.cfg.MaxDelay)
	st.Step, st.Delay = step, delay
	st.AtMaxDelay = delay >= l.cfg.MaxDelay && st.IndicatorMs > st.ThresholdMs
	in.IndicatorMs, in.Output = st.IndicatorMs, delay
	out := rs.policy.Decide(in)
	st.Policy, st.Classes, st.Network, st.Reservations = rs.policy.Name(), out.Classes, out.Network, out.Reservations
	l.applyRateLever(rs, st, in, out, step)
	if len(out.Throttleable) > 0 {
		st.Throttleable = rs.thr[:0] // publish copies it out under the lock
	}
	in.thrBuf = out.Throttleable[:0] // keep the grown buffer
	clear(rs.slowed)
	rs.slowedK, rs.slowedAt = grow(rs.slowedK, len(in.Consumers)), p
	clear(rs.slowedK)
	for _, k := range out.Throttleable {
		rs.slowed[in.Consumers[k].Addr], rs.slowedK[k] = true, true
		if k < len(p.consumers) {
			st.Throttleable = append(st.Throttleable, p.consumers[k].name)
		} else {
			st.Throttleable = append(st.Throttleable, p.static[k-len(p.consumers)].name)
		}
	}
	if len(p.static) > 0 {
		sort.Strings(st.Throttleable)
	}
	if st.Throttleable != nil {
		rs.thr = st.Throttleable
	}
	return out
}

// publish is the publish stage: each consumer's setting on its status
// row, and the resource's status where the API, metrics and the cluster
// seam read it.
func (l *Loops) publish(rs *resourceState, name string, st *ResourceStatus) {
	for k, s := range rs.set { // static consumers too: what the resource asks of anyone
		if s.IsZero() {
			continue
		}
		st.Slowed++
		st.MaxReadDelay, st.MaxWriteDelay = max(st.MaxReadDelay, s.ReadDelay), max(st.MaxWriteDelay, s.WriteDelay)
		if k < len(st.Consumers) {
			st.Consumers[k].Throttled, st.Consumers[k].Setting = true, s
			st.Consumers[k].Held = rs.held.holding(rs.in.Consumers[k].Addr)
		}
	}
	// The published status owns its slices, which Status deep-copies:
	// the tick's (rs.sts, rs.thr) are handed over, and the ones
	// published before are next tick's to fill.
	l.mu.Lock()
	if rs.pub == nil {
		rs.pub = &ResourceStatus{}
		l.status[name] = rs.pub
	}
	old := rs.pub
	st.Consumers, rs.sts = handOver(old.Consumers, st.Consumers)
	st.Throttleable, rs.thr = handOver(old.Throttleable, st.Throttleable)
	*rs.pub = *st
	l.mu.Unlock()
}

// handOver publishes src, this tick's slice, in place of dst, the one
// published before, and returns the array for next tick to fill: no copy
// of 10,000 rows. An empty src is copied into dst's array, nil where src
// is (status JSON tells an absent list from an empty one), as before.
func handOver[T any](dst, src []T) (pub, free []T) {
	if len(src) == 0 {
		return appendOrNil(dst, src), src
	}
	return src, dst[:0]
}

// appendOrNil is src copied into dst's array, nil where src is (status
// JSON tells an absent list from an empty one).
func appendOrNil[T any](dst, src []T) []T {
	if src == nil {
		return nil
	}
	return append(dst[:0], src...)
}

// grow is s with length n, its array reused where it is large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
