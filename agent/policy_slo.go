package agent

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
	"time"
)

// SLOClass is one service class of the slo-classes policy (seed 004's
// task, knowledge and power users). Zero objectives are none.
type SLOClass struct {
	Name     string
	Members  []netip.Addr
	Priority int // lower gives way first
	IOPS     float64
	MBs      float64
	Latency  time.Duration
	Burst    time.Duration
}

// ClassStatus is one SLO class of a resource: the last tick's figures and
// seed 004's metrics over the class's life (since the policy started or
// the config was reloaded). Undefined figures (no I/O yet, no objective)
// are NaN and encode as null.
type ClassStatus struct {
	Name     string   `json:"name"`
	Priority int      `json:"priority"`
	Members  []string `json:"members"`
	// Objectives (0: none).
	IOPSObjective      float64 `json:"iops_objective"`
	MBsObjective       float64 `json:"mb_s_objective"`
	LatencyObjectiveMs float64 `json:"latency_objective_ms"`
	BurstS             float64 `json:"burst_s"`
	// Last tick.
	IOPS      JSONFloat `json:"iops"`
	MBs       JSONFloat `json:"mb_s"`
	LatencyMs JSONFloat `json:"latency_ms"`
	CreditS   float64   `json:"credit_s"` // banked burst, seconds of objective
	Missing   bool      `json:"missing"`
	Exceeding bool      `json:"exceeding"`
	DelayMs   float64   `json:"delay_ms"`
	// Over the class's life: means, seed 004 eq. (1) for throughput (MB/s)
	// and IOPS, eq. (2) for latency, and jitter.
	Seconds                float64   `json:"seconds"`
	MeanIOPS               JSONFloat `json:"mean_iops"`
	MeanMBs                JSONFloat `json:"mean_mb_s"`
	MeanLatencyMs          JSONFloat `json:"mean_latency_ms"`
	ThroughputDeviationPct JSONFloat `json:"throughput_deviation_pct"`
	IOPSDeviationPct       JSONFloat `json:"iops_deviation_pct"`
	LatencyDeviationMs     JSONFloat `json:"latency_deviation_ms"`
	JitterMs               JSONFloat `json:"jitter_ms"`
}

// ThroughputDeviationPct is seed 004's eq. (1): (attained − expected) /
// expected × 100; negative means below the objective. NaN without an
// objective.
func ThroughputDeviationPct(attained, expected float64) float64 {
	if !(expected > 0) {
		return math.NaN()
	}
	return (attained - expected) / expected * 100
}

// LatencyDeviation is seed 004's eq. (2): observed − expected; negative
// means the deadline was met. NaN without an objective.
func LatencyDeviation(observed, expected float64) float64 {
	if !(expected > 0) {
		return math.NaN()
	}
	return observed - expected
}

// Jitter is the mean absolute difference between consecutive latency
// samples. Seed 004 defines jitter only in words ("the variation in delay
// experienced by packets") and reports it in ms; the mean successive
// difference is that variation (RFC 3550's interarrival jitter without its
// 1/16 smoothing) and, unlike a standard deviation, does not count a slow
// drift as jitter. NaN samples (ticks without I/O) are skipped; fewer than
// two samples give NaN.
func Jitter(samples []float64) float64 {
	var j jitterAcc
	for _, s := range samples {
		j.add(s)
	}
	return j.value()
}

// jitterAcc accumulates Jitter tick by tick.
type jitterAcc struct {
	last   float64
	have   bool
	sum    float64
	nDiffs int
}

func (j *jitterAcc) add(x float64) {
	if math.IsNaN(x) {
		return
	}
	if j.have {
		j.sum += math.Abs(x - j.last)
		j.nDiffs++
	}
	j.last, j.have = x, true
}

func (j *jitterAcc) value() float64 {
	if j.nDiffs == 0 {
		return math.NaN()
	}
	return j.sum / float64(j.nDiffs)
}

// sloTolerance is how far below its floor a class may be before it counts
// as missing (and above before it counts as exceeding): a class whose
// demand is exactly its objective (fio's rate) hovers around it, and
// ±5 % tick noise must not make it flap between the two.
const sloTolerance = 0.05

// sloPolicy protects classes that miss their objectives by slowing the
// consumers of classes that exceed theirs.
//
// Each tick, per class: IOPS and MB/s of its members together, and their
// I/O-weighted mean wait. Its usage ratio r is attained/objective (the
// larger of IOPS and MB/s, where set). Burst credit, in seconds of
// objective, grows by (1 − r)·Δt while below and shrinks by (r − 1)·Δt
// while above, within [0, burst]: a class may run above its objective for
// `burst` seconds after as long below it.
//
// A class misses when its wait is above its latency objective, or when it
// is below its throughput floor while the resource is saturated (the
// controller asks for delay; unsaturated, it simply asks for less). A
// class exceeds when it is above its floor with no credit left; a class
// without throughput objectives, and any consumer in no class, is best
// effort and always exceeds while it moves data.
//
// While any class misses, one integrator rises a delay step per tick (and
// falls one per tick otherwise); it fills the exceeding groups one after
// another — best effort first, then lowest priority, then most slack
// (largest r) — each up to max_delay, so the highest-priority exceeder is
// slowed last. Exceeders also get at least the controller's output, so
// the resource's read-wait threshold still holds. Important consumers are
// never slowed.
type sloPolicy struct {
	classes []*sloClass
	member  map[netip.Addr]int
	level   time.Duration
	// smoothing is the time constant of the latency and usage ratio that
	// decide missing and exceeding: at seed 004's rates (5 IOPS) most
	// 100 ms ticks see zero or one I/O, and raw ticks would flap.
	smoothing time.Duration
}

// DefaultSLOSmoothing is the decision signals' time constant.
const DefaultSLOSmoothing = 2 * time.Second

type sloClass struct {
	SLOClass
	credit         float64 // seconds of objective
	seconds        float64
	ios, bytes     float64
	latSum, latIOs float64
	jitter         jitterAcc
	// Smoothed decision signals (NaN until the first sample); a tick
	// without I/O keeps the last latency.
	latS, ratioS float64
}

// SLOClasses returns the slo-classes policy for the given classes.
func SLOClasses(classes []SLOClass) Policy {
	p := &sloPolicy{member: map[netip.Addr]int{}, smoothing: DefaultSLOSmoothing}
	for i, c := range classes {
		p.classes = append(p.classes, &sloClass{SLOClass: c, latS: math.NaN(), ratioS: math.NaN()})
		for _, m := range c.Members {
			p.member[m] = i
		}
	}
	return p
}

func (p *sloPolicy) Name() string              { return "slo-classes" }
func (p *sloPolicy) Indicator() IndicatorScope { return IndicatorAll }

// group is a set of consumers that is slowed together.
type sloGroup struct {
	class    int // -1: best effort (no class)
	priority int
	ratio    float64
	addrs    []int // indexes into in.Consumers
}

// sloTick is one class's figures in one tick.
type sloTick struct {
	iops, mbs, lat, ratio float64
	missing, exceeding    bool
	members               []int // indexes into in.Consumers
}

func (p *sloPolicy) Decide(in *PolicyInput) PolicyOutput {
	out := PolicyOutput{Settings: in.settings(), Throttleable: in.throttleable()}
	ticks, best := p.tally(in)
	groups, anyMissing := p.judge(in, ticks)
	if len(best.addrs) > 0 {
		groups = append(groups, best)
	}
	sortSLOGroups(groups)
	delays := p.fill(in, groups, anyMissing, &out)
	for i, cl := range p.classes {
		out.Classes = append(out.Classes, cl.status(ticks[i], delays[i]))
	}
	return out
}

// tally sums each class's members' IOPS and MB/s, and gathers the
// consumers in no class that move data (not important ones) into the
// best-effort group.
func (p *sloPolicy) tally(in *PolicyInput) ([]sloTick, sloGroup) {
	ticks := make([]sloTick, len(p.classes))
	best := sloGroup{class: -1, priority: math.MinInt, ratio: math.Inf(1)}
	for k, c := range in.Consumers {
		i, ok := p.member[c.Addr]
		if !ok {
			if c.ReadBps+c.WriteBps > 0 && !c.Important {
				best.addrs = append(best.addrs, k)
			}
			continue
		}
		t := &ticks[i]
		t.members = append(t.members, k)
		t.iops += c.ReadIOPS + c.WriteIOPS
		t.mbs += (c.ReadBps + c.WriteBps) / 1e6
	}
	return ticks, best
}

// judge brings each class's running figures (life totals, credit,
// smoothed signals) up to this tick, decides whether it misses or
// exceeds, and returns the exceeding classes as groups to slow.
func (p *sloPolicy) judge(in *PolicyInput, ticks []sloTick) (groups []sloGroup, anyMissing bool) {
	dt := in.Interval.Seconds()
	alpha := 1.0
	if dt+p.smoothing.Seconds() > 0 {
		alpha = dt / (dt + p.smoothing.Seconds())
	}
	smooth := func(s *float64, x float64) {
		switch {
		case math.IsNaN(x):
		case math.IsNaN(*s):
			*s = x
		default:
			*s += alpha * (x - *s)
		}
	}
	for i, cl := range p.classes {
		t := &ticks[i]
		// I/O-weighted wait of the members' reads and writes.
		var ws, n float64
		for _, k := range t.members {
			c := in.Consumers[k]
			if c.ReadIOPS > 0 && !math.IsNaN(c.ReadWaitMs) {
				ws += c.ReadWaitMs * c.ReadIOPS
				n += c.ReadIOPS
			}
			if c.WriteIOPS > 0 && !math.IsNaN(c.WriteWaitMs) {
				ws += c.WriteWaitMs * c.WriteIOPS
				n += c.WriteIOPS
			}
		}
		t.lat = math.NaN()
		if n > 0 {
			t.lat = ws / n
			cl.latSum += ws * dt
			cl.latIOs += n * dt
		}
		cl.jitter.add(t.lat)
		cl.seconds += dt
		cl.ios += t.iops * dt
		cl.bytes += t.mbs * dt
		t.ratio = math.NaN()
		if cl.IOPS > 0 {
			t.ratio = t.iops / cl.IOPS
		}
		if cl.MBs > 0 {
			t.ratio = max(nanTo(t.ratio, 0), t.mbs/cl.MBs)
		}
		if !math.IsNaN(t.ratio) {
			cl.credit = min(max(cl.credit+(1-t.ratio)*dt, 0), cl.Burst.Seconds())
		}
		smooth(&cl.latS, t.lat)
		smooth(&cl.ratioS, t.ratio)
		latMiss := cl.Latency > 0 && cl.latS > ms(cl.Latency)
		floorMiss := !math.IsNaN(cl.ratioS) && cl.ratioS < 1-sloTolerance && in.Output > 0
		t.missing = latMiss || floorMiss
		anyMissing = anyMissing || t.missing
		bestEffort := cl.IOPS == 0 && cl.MBs == 0 && cl.Latency == 0
		t.exceeding = t.mbs > 0 && (bestEffort || (!math.IsNaN(cl.ratioS) && cl.ratioS > 1+sloTolerance && cl.credit <= 0))
		if t.exceeding {
			g := sloGroup{class: i, priority: cl.Priority, ratio: cl.ratioS}
			if bestEffort {
				g.ratio = math.Inf(1)
			}
			for _, k := range t.members {
				if !in.Consumers[k].Important {
					g.addrs = append(g.addrs, k)
				}
			}
			groups = append(groups, g)
		}
	}
	return groups, anyMissing
}

// sortSLOGroups orders the groups in the order they are slowed: lowest
// priority first, then most slack (largest ratio), then class order.
func sortSLOGroups(groups []sloGroup) {
	slices.SortStableFunc(groups, func(a, b sloGroup) int {
		switch {
		case a.priority != b.priority:
			return cmp.Compare(a.priority, b.priority)
		case a.ratio != b.ratio:
			if a.ratio > b.ratio {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.class, b.class)
	})
}

// fill moves the integrator a step (up while any class misses) and fills
// the groups with it in order, each up to max_delay; it sets the delays
// of the groups' consumers in out and returns each class's delay.
func (p *sloPolicy) fill(in *PolicyInput, groups []sloGroup, anyMissing bool, out *PolicyOutput) []time.Duration {
	if anyMissing {
		p.level += in.DelayStep
	} else {
		p.level -= in.DelayStep
	}
	p.level = min(max(p.level, 0), time.Duration(len(groups))*in.MaxDelay)
	delays := make([]time.Duration, len(p.classes))
	for g, gr := range groups {
		fill := min(max(p.level-time.Duration(g)*in.MaxDelay, 0), in.MaxDelay)
		d := roundUpStep(max(fill, in.Output), in.DelayStep, in.MaxDelay)
		if gr.class >= 0 {
			delays[gr.class] = d
		}
		for _, k := range gr.addrs {
			c := in.Consumers[k]
			out.Throttleable = append(out.Throttleable, k)
			if d > 0 {
				out.Settings[k] = directed(c, d, in)
			}
		}
	}
	slices.Sort(out.Throttleable)
	return delays
}

// status is the class's ClassStatus: this tick's figures t, its delay d,
// and the means and deviations over its life.
func (cl *sloClass) status(t sloTick, d time.Duration) ClassStatus {
	cs := ClassStatus{Name: cl.Name, Priority: cl.Priority, IOPSObjective: cl.IOPS, MBsObjective: cl.MBs,
		LatencyObjectiveMs: ms(cl.Latency), BurstS: cl.Burst.Seconds(),
		IOPS: JSONFloat(t.iops), MBs: JSONFloat(t.mbs), LatencyMs: JSONFloat(t.lat), CreditS: cl.credit,
		Missing: t.missing, Exceeding: t.exceeding, DelayMs: ms(d), Seconds: cl.seconds}
	for _, m := range cl.Members {
		cs.Members = append(cs.Members, m.String())
	}
	meanIOPS, meanMBs, meanLat := cl.ios/cl.seconds, cl.bytes/cl.seconds, math.NaN()
	if cl.latIOs > 0 {
		meanLat = cl.latSum / cl.latIOs
	}
	cs.MeanIOPS, cs.MeanMBs, cs.MeanLatencyMs = JSONFloat(meanIOPS), JSONFloat(meanMBs), JSONFloat(meanLat)
	cs.ThroughputDeviationPct = JSONFloat(ThroughputDeviationPct(meanMBs, cl.MBs))
	cs.IOPSDeviationPct = JSONFloat(ThroughputDeviationPct(meanIOPS, cl.IOPS))
	cs.LatencyDeviationMs = JSONFloat(LatencyDeviation(meanLat, ms(cl.Latency)))
	cs.JitterMs = JSONFloat(cl.jitter.value())
	return cs
}

func nanTo(x, v float64) float64 {
	if math.IsNaN(x) {
		return v
	}
	return x
}
