package agent

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/throttle"
)

// Reservation is one consumer's RAD reservation (seed 003, Radon): Amount
// bytes (or I/Os, IOs true) of reads + writes in every Period.
type Reservation struct {
	Addr   netip.Addr
	Amount float64
	IOs    bool
	Period time.Duration
}

// ReservationStatus is one reservation's accounting, for status.
type ReservationStatus struct {
	Consumer string  `json:"consumer"`
	Unit     string  `json:"unit"` // bytes | ios
	Reserved float64 `json:"reserved"`
	PeriodS  float64 `json:"period_s"`
	// PeriodStart is when the current period began (periods follow each
	// other from the consumer's first tick seen).
	PeriodStart time.Time `json:"period_start"`
	// Attained is what the consumer moved so far in the current period.
	Attained float64 `json:"attained"`
	// LaxityS is the period's time left minus the time the rest of the
	// reservation takes at the consumer's current rate (seed 003, Fig 4.1);
	// LaxityPct is that over the time left (Shewmaker's %laxity: 1 = met
	// or nothing left to do, ≤ 0 = cannot make it at this rate).
	LaxityS   JSONFloat `json:"laxity_s"`
	LaxityPct JSONFloat `json:"laxity_pct"`
	AtRisk    bool      `json:"at_risk"`
	// Periods and PeriodsMet count the ended periods and those in which
	// the reservation was attained.
	Periods    int `json:"periods"`
	PeriodsMet int `json:"periods_met"`
}

// NetStatus is the network saturation indicator of a resource's consumers.
type NetStatus struct {
	// QueueMs is the indicator: the smallest queueing delay (srtt −
	// min_rtt) among the active flows (NaN: no active flow).
	QueueMs     JSONFloat `json:"queue_ms"`
	ThresholdMs float64   `json:"threshold_ms"`
	Flows       int       `json:"flows"`
	// Discounted: the smallest came from a flow we throttle, with the
	// delay we applied subtracted (see NetIndicator).
	Discounted bool `json:"discounted"`
	// RawQueueMs is the indicator without the discount (NetReading).
	RawQueueMs    JSONFloat `json:"raw_queue_ms"`
	Congested     bool      `json:"congested"`
	DiskSaturated bool      `json:"disk_saturated"`
	AtRisk        int       `json:"reservations_at_risk"`
	// Level is the relief level in delay steps (see reservations).
	Level int `json:"level"`
}

// NetIndicator is the network saturation indicator from the consumers'
// TCP_INFO: the smallest queueing delay (srtt − min_rtt) among the flows
// that moved data this tick (an idle connection's srtt is stale).
//
// Why the smallest: a queue on the shared link (the target's port, a
// switch uplink) delays every flow that crosses it, so the least-delayed
// active flow bounds the congestion all of them see. What only some flows
// carry is not the shared link's congestion: measured in the lab, a
// rate-limited request/response initiator's srtt carries its delayed-ACK
// and think time (the target's small response is acked only with the next
// command or after the 40 ms delayed-ACK timer), 13–20 ms of "queueing"
// on an idle link, while the saturated link added 50 ms to every flow.
//
// Our own delay line sits inside the round trips of the consumers we
// throttle: their data segments are held for the read delay before they
// leave the target, their pure ACKs for the write delay, so their srtt
// grows by up to the larger of the two. Fed back as congestion, that would
// make the policy throttle harder and raise the indicator further — the
// controller feeding on itself. So a throttled flow counts only with the
// delay we applied subtracted (we know it: applied, floored at 0). srtt is
// an EWMA (gain 1/8 per RTT sample) and lags a changed delay by a few RTTs:
// right after an increase the discounted value reads low (the policy
// eases off: the safe direction), right after a decrease it reads high,
// but the minimum then comes from an unthrottled or steadier flow.
// Discounted reports that the minimum came from a throttled flow.
func NetIndicator(cs []ConsumerInput, applied map[netip.Addr]throttle.Setting) NetReading {
	r := NetReading{QueueMs: math.NaN(), RawQueueMs: math.NaN()}
	for _, c := range cs {
		if math.IsNaN(c.QueueMs) || c.ReadBps+c.WriteBps <= 0 {
			continue
		}
		q, thr := c.QueueMs, false
		if s := applied[c.Addr]; !s.IsZero() {
			q, thr = max(0, q-ms(max(s.ReadDelay, s.WriteDelay))), true
		}
		r.Flows++
		if math.IsNaN(r.QueueMs) || q < r.QueueMs || q == r.QueueMs && !thr {
			r.QueueMs, r.Discounted = q, thr
		}
		if math.IsNaN(r.RawQueueMs) || c.QueueMs < r.RawQueueMs {
			r.RawQueueMs = c.QueueMs
		}
	}
	return r
}

// NetReading is NetIndicator's result.
type NetReading struct {
	// QueueMs is the indicator (NaN: no active flow).
	QueueMs float64
	// RawQueueMs is the same minimum with nothing discounted: what the
	// indicator would be if our delay were taken for congestion (equal to
	// QueueMs when nothing is throttled; with a dry-run backend, where
	// nothing applied is real, it is the true reading).
	RawQueueMs float64
	Flows      int
	Discounted bool
}

// Laxity is seed 003's laxity of a reservation at time left before the
// period's deadline with remaining work still to do at rate (work per
// second): l = left − remaining/rate, and %laxity = l / left. Nothing
// remaining: l = left, 100 %. No rate with work remaining: −Inf.
func Laxity(left time.Duration, remaining, rate float64) (laxS, pct float64) {
	l := left.Seconds()
	if l <= 0 {
		if remaining > 0 {
			return math.Inf(-1), math.Inf(-1)
		}
		return 0, 1
	}
	if remaining <= 0 {
		return l, 1
	}
	if rate <= 0 {
		return math.Inf(-1), math.Inf(-1)
	}
	laxS = l - remaining/rate
	return laxS, laxS / l
}

// Relief thresholds of the reservations policy.
const (
	// riskPct: a reservation whose %laxity is below this is at risk (at its
	// current rate it would finish with less than a tenth of the period to
	// spare).
	riskPct = 0.1
	// spareFrac: a reserved consumer whose %laxity is at least this may
	// give way like a non-reserved one. 1: only once it has attained its
	// reservation for the period. In the lab, 0.5 let the policy slow the
	// reserved writer late in a period it had not yet met (at 1.25× its
	// reservation it reaches 50 % laxity there) and it missed 7 of 11.
	spareFrac = 1
	// rampSteps: the next candidate is throttled only once the one before
	// it has this many delay steps more, so relief goes in order.
	rampSteps = 4
	// rateAlpha smooths the per-tick rate the laxity is computed with.
	rateAlpha = 0.25
	// fillShare: the non-reserved consumers eligible for relief are the
	// largest ones that together carry this share of the non-reserved
	// traffic (by the ranking metric): the ones that fill the link or the
	// disk, not a light reader whose slowing buys nothing.
	fillShare = 0.8
)

type resvState struct {
	Reservation
	start    time.Time
	attained float64
	rate     float64 // EWMA of the per-tick rate
	seen     bool
	periods  int
	met      int
}

// reservations is the RAD policy (seed 003): each reserved consumer should
// move its Amount in every Period. Pressure is any of: a reservation at
// risk (%laxity < riskPct while it is active), network congestion (the
// NetIndicator above the net threshold) or disk saturation (the
// controller asks for delay). Under pressure the relief level (in delay
// steps) rises ×1.25 per tick, else it falls ×7/8; the level is spent on
// candidates in order — non-reserved consumers first (infinite laxity),
// then reserved ones with spare laxity, most laxity first — candidate i
// getting (level − i·rampSteps) steps, capped at the maximum delay. Among
// non-reserved consumers, under network congestion the ones that fill the
// link go first (bytes on the wire this tick), under disk saturation alone
// the heaviest writers; only the largest that carry fillShare of that
// traffic are candidates. At-risk reserved consumers
// and important ones are never slowed.
type reservations struct {
	resv        map[netip.Addr]*resvState
	order       []netip.Addr // reservation config order, for status
	netThresh   float64      // ms
	level       int
	applied     map[netip.Addr]throttle.Setting // last tick's output
	cands       []cand
	statusNames map[netip.Addr]string
}

type cand struct {
	k      int
	lax    float64 // %laxity; +Inf for the non-reserved
	metric float64
}

// Reservations returns the reservations policy; netThreshold is the
// queueing delay above which the network counts as congested.
func Reservations(rs []Reservation, netThreshold time.Duration) Policy {
	p := &reservations{resv: map[netip.Addr]*resvState{}, netThresh: ms(netThreshold), applied: map[netip.Addr]throttle.Setting{},
		statusNames: map[netip.Addr]string{}}
	for _, r := range rs {
		p.resv[r.Addr] = &resvState{Reservation: r}
		p.order = append(p.order, r.Addr)
		p.statusNames[r.Addr] = r.Addr.String()
	}
	return p
}

func reservationsFactory(r config.Resource) func() Policy {
	var rs []Reservation
	for _, c := range r.Reservations {
		a, err := netip.ParseAddr(c.Consumer)
		if err != nil {
			continue // validated by config
		}
		x := Reservation{Addr: a.Unmap(), Amount: c.Bytes, Period: c.Period}
		if c.IOs > 0 {
			x.Amount, x.IOs = c.IOs, true
		}
		rs = append(rs, x)
	}
	thr := cmp.Or(r.NetThreshold, config.DefaultNetThreshold)
	return func() Policy { return Reservations(rs, thr) }
}

func (p *reservations) Name() string              { return "reservations" }
func (p *reservations) Indicator() IndicatorScope { return IndicatorAll }

// account adds a tick of work to a reservation, closing the periods that
// ended, and returns its laxity.
func (p *reservations) account(r *resvState, c ConsumerInput, in *PolicyInput) (laxS, pct float64) {
	secs := in.Interval.Seconds()
	x := c.ReadBps + c.WriteBps
	if r.IOs {
		x = c.ReadIOPS + c.WriteIOPS
	}
	if !r.seen {
		r.seen, r.start, r.rate = true, in.Now, x
	}
	for !in.Now.Before(r.start.Add(r.Period)) {
		r.periods++
		if r.attained >= r.Amount {
			r.met++
		}
		r.attained, r.start = 0, r.start.Add(r.Period)
	}
	r.attained += x * secs
	r.rate += rateAlpha * (x - r.rate)
	return Laxity(r.start.Add(r.Period).Sub(in.Now), r.Amount-r.attained, r.rate)
}

// fillers keeps, of the non-reserved candidates (lax +Inf), the largest
// by metric that together carry fillShare of their total, and every
// reserved candidate.
func fillers(cs []cand) []cand {
	var total float64
	for _, c := range cs {
		if math.IsInf(c.lax, 1) {
			total += c.metric
		}
	}
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].lax != cs[j].lax {
			return cs[i].lax > cs[j].lax
		}
		return cs[i].metric > cs[j].metric
	})
	out := cs[:0]
	var sum float64
	for _, c := range cs {
		if math.IsInf(c.lax, 1) {
			if c.metric <= 0 || sum >= fillShare*total {
				continue
			}
			sum += c.metric
		}
		out = append(out, c)
	}
	return out
}

func (p *reservations) Decide(in *PolicyInput) PolicyOutput {
	out := PolicyOutput{Settings: in.settings(), Throttleable: in.throttleable()}
	nr := NetIndicator(in.Consumers, p.applied)
	ns := &NetStatus{QueueMs: JSONFloat(nr.QueueMs), RawQueueMs: JSONFloat(nr.RawQueueMs), ThresholdMs: p.netThresh, Flows: nr.Flows,
		Discounted: nr.Discounted, Congested: nr.QueueMs > p.netThresh, DiskSaturated: in.Output > 0}
	laxOf := p.candidates(in, ns)
	p.cands = fillers(p.cands)
	p.setLevel(in, ns)
	p.apply(in, &out)
	out.Network = ns
	p.status(in, laxOf, &out)
	return out
}

// candidates accounts each reserved consumer's period and collects into
// p.cands the consumers that may be delayed: unreserved ones with traffic
// (as fillers) and reserved ones with spare laxity. It returns the
// reserved consumers' laxity in seconds and counts those at risk in ns.
func (p *reservations) candidates(in *PolicyInput, ns *NetStatus) map[netip.Addr]float64 {
	p.cands = p.cands[:0]
	laxOf := map[netip.Addr]float64{}
	for k, c := range in.Consumers {
		r := p.resv[c.Addr]
		if r == nil {
			if c.Important || c.ReadBps+c.WriteBps <= 0 {
				continue
			}
			m := c.ReadBps + c.WriteBps
			if !ns.Congested && ns.DiskSaturated {
				m = c.WriteBps
			}
			p.cands = append(p.cands, cand{k: k, lax: math.Inf(1), metric: m})
			continue
		}
		laxS, pct := p.account(r, c, in)
		laxOf[c.Addr] = laxS
		// An idle reserved consumer is not at risk: it asks for nothing.
		atRisk := pct < riskPct && r.rate > 0
		if atRisk {
			ns.AtRisk++
		}
		if !c.Important && pct >= spareFrac && c.ReadBps+c.WriteBps > 0 {
			p.cands = append(p.cands, cand{k: k, lax: pct, metric: c.ReadBps + c.WriteBps})
		}
	}
	return laxOf
}

// setLevel raises the pressure level while the network is congested, the
// disk saturated or a reservation at risk, lowers it otherwise, and caps
// it (recorded in ns).
func (p *reservations) setLevel(in *PolicyInput, ns *NetStatus) {
	// Multiplicative in both directions (×1.25 up, ×7/8 down, at least a
	// step): from nothing to the maximum on two candidates in ~2 s at
	// 100 ms ticks, where one step a tick took 12 s and missed every
	// period of the lab's net-bound load.
	if ns.Congested || ns.DiskSaturated || ns.AtRisk > 0 {
		p.level += max(1, p.level/4)
	} else if p.level > 0 {
		p.level -= max(1, p.level/8)
	}
	maxSteps := 1
	if in.DelayStep > 0 {
		maxSteps = int(in.MaxDelay / in.DelayStep)
	}
	// Cap the level where the last candidate is at the maximum: beyond it
	// more pressure buys nothing and only delays the release.
	p.level = min(p.level, maxSteps+rampSteps*max(0, len(p.cands)-1))
	ns.Level = p.level
}

// apply spreads the level over the candidates in order, rampSteps fewer
// steps each, into out's settings (and p.applied), and makes every
// candidate throttleable.
func (p *reservations) apply(in *PolicyInput, out *PolicyOutput) {
	clear(p.applied)
	for i, cd := range p.cands {
		steps := p.level - i*rampSteps
		if steps <= 0 {
			break
		}
		c := in.Consumers[cd.k]
		d := min(time.Duration(steps)*in.DelayStep, in.MaxDelay)
		s := directed(c, d, in)
		out.Settings[cd.k] = s
		p.applied[c.Addr] = s
	}
	for _, cd := range p.cands {
		out.Throttleable = append(out.Throttleable, cd.k)
	}
	slices.Sort(out.Throttleable)
}

// status reports each reservation in out, with its laxity where laxOf
// has it (its consumer was seen this tick).
func (p *reservations) status(in *PolicyInput, laxOf map[netip.Addr]float64, out *PolicyOutput) {
	for _, a := range p.order {
		r := p.resv[a]
		unit := "bytes"
		if r.IOs {
			unit = "ios"
		}
		st := ReservationStatus{Consumer: p.statusNames[a], Unit: unit, Reserved: r.Amount, PeriodS: r.Period.Seconds(), PeriodStart: r.start,
			Attained: r.attained, Periods: r.periods, PeriodsMet: r.met, LaxityS: JSONFloat(math.NaN()), LaxityPct: JSONFloat(math.NaN())}
		if l, ok := laxOf[a]; ok {
			_, pct := Laxity(r.start.Add(r.Period).Sub(in.Now), r.Amount-r.attained, r.rate)
			st.LaxityS, st.LaxityPct = JSONFloat(l), JSONFloat(pct)
			st.AtRisk = pct < riskPct && r.rate > 0
		}
		out.Reservations = append(out.Reservations, st)
	}
}
