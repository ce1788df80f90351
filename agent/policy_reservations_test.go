package agent

import (
	"bufio"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sanqos/sanqos/throttle"
)

func TestLaxity(t *testing.T) {
	inf := math.Inf(-1)
	for _, tc := range []struct {
		name            string
		left            time.Duration
		remaining, rate float64
		lax, pct        float64
	}{
		{"on time with spare", time.Second, 500, 1000, 0.5, 0.5},
		{"exactly on time", time.Second, 1000, 1000, 0, 0},
		{"late at this rate", 500 * time.Millisecond, 1000, 1000, -0.5, -1},
		{"met already", 300 * time.Millisecond, 0, 0, 0.3, 1},
		{"overshot", 300 * time.Millisecond, -200, 50, 0.3, 1},
		{"stalled with work left", time.Second, 1, 0, inf, inf},
		{"deadline passed, work left", 0, 1, 1000, inf, inf},
		{"deadline passed, done", 0, 0, 1000, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lax, pct := Laxity(tc.left, tc.remaining, tc.rate)
			if math.Abs(lax-tc.lax) > 1e-9 && lax != tc.lax || math.Abs(pct-tc.pct) > 1e-9 && pct != tc.pct {
				t.Fatalf("Laxity(%v, %v, %v) = %v, %v; want %v, %v", tc.left, tc.remaining, tc.rate, lax, pct, tc.lax, tc.pct)
			}
		})
	}
}

// ssFixture reads `ss -tinH` output captured on the lab's target (the
// reservations experiment writes one per phase; these are from
// results/reservations/20261122-132436, where the policy's maximum delay
// was 20 ms and it throttled every busy flow in the disk-bound phase) into consumer inputs the
// way the agent builds them from TCP_INFO: per peer, the largest srtt −
// min_rtt of its connections; a peer that moved bytes is active.
func ssFixture(t *testing.T, name string) []ConsumerInput {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "tcpinfo", name+".ss"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	by := map[netip.Addr]*ConsumerInput{}
	var order []netip.Addr
	var peer netip.Addr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, " ") {
			f := strings.Fields(line)
			peer = netip.MustParseAddrPort(f[3]).Addr()
			continue
		}
		var rtt, minrtt, bytes float64
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, ":")
			switch k {
			case "rtt":
				rtt, _ = strconv.ParseFloat(strings.Split(v, "/")[0], 64)
			case "minrtt":
				minrtt, _ = strconv.ParseFloat(v, 64)
			case "bytes_received", "bytes_acked":
				b, _ := strconv.ParseFloat(v, 64)
				bytes += b
			}
		}
		c := by[peer]
		if c == nil {
			c = &ConsumerInput{Addr: peer, QueueMs: 0}
			by[peer] = c
			order = append(order, peer)
		}
		c.QueueMs = max(c.QueueMs, rtt-minrtt)
		c.WriteBps += bytes // only "moved data" matters here
	}
	var out []ConsumerInput
	for _, a := range order {
		out = append(out, *by[a])
	}
	return out
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// The indicator on TCP_INFO captured in the lab: a 24 Mbit/s link toward
// the target queues ~40–50 ms for every flow; on the disk-bound load
// (no link limit) some request/response flows show 1–12 ms of delayed-ACK
// and think time but the least-delayed flows show none; and when every
// flow carries our delay (the disk-bound load with the policy on, 16–18 ms
// srtt on an idle link), only the discount keeps it from reading as
// congestion.
func TestNetIndicatorLabFixtures(t *testing.T) {
	const thr = 2.0 // ms, config.DefaultNetThreshold
	throttledAll := func(d time.Duration) map[netip.Addr]throttle.Setting {
		m := map[netip.Addr]throttle.Setting{}
		for _, h := range []string{"10.99.0.2", "10.99.0.3", "10.99.0.4", "10.99.0.5"} {
			m[addr(h)] = throttle.Setting{WriteDelay: d}
		}
		return m
	}
	for _, tc := range []struct {
		fixture        string
		applied        map[netip.Addr]throttle.Setting
		congested      bool
		min, max       float64
		wantDiscounted bool
	}{
		{"net-bound-off", nil, true, 30, 60, false},
		{"disk-bound-off", nil, false, 0, 0.5, false},
		// Every flow throttled by up to 20 ms (the policy's maximum then):
		// raw it would read 16 ms of "congestion" that is all ours.
		{"disk-bound-reservations", nil, true, 15, 20, false},
		{"disk-bound-reservations", throttledAll(20 * time.Millisecond), false, 0, 0.5, true},
		// On the congested link a throttled flow's queueing survives the
		// discount of a smaller delay: the link is still congested.
		{"net-bound-reservations", throttledAll(5 * time.Millisecond), true, 15, 55, true},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			cs := ssFixture(t, tc.fixture)
			nr := NetIndicator(cs, tc.applied)
			q, n, disc := nr.QueueMs, nr.Flows, nr.Discounted
			if n != 4 {
				t.Fatalf("%d active flows, want the 4 initiators", n)
			}
			if q < tc.min || q > tc.max || (q > thr) != tc.congested || disc != tc.wantDiscounted {
				t.Fatalf("indicator %.3f ms (discounted %v), want %v..%v, congested %v, discounted %v", q, disc, tc.min, tc.max, tc.congested, tc.wantDiscounted)
			}
		})
	}
}

// The delay we apply is discounted from a throttled flow, and an idle flow
// (stale srtt) or one without an RTT sample is not counted.
func TestNetIndicatorDiscountsOwnDelay(t *testing.T) {
	act := func(a netip.Addr, q float64) ConsumerInput {
		return ConsumerInput{Addr: a, QueueMs: q, WriteBps: 1e6}
	}
	idle := ConsumerInput{Addr: c4, QueueMs: 0.1}
	noSample := ConsumerInput{Addr: c4, QueueMs: math.NaN(), WriteBps: 1e6}
	for _, tc := range []struct {
		name    string
		cs      []ConsumerInput
		applied map[netip.Addr]throttle.Setting
		want    float64
		flows   int
		disc    bool
	}{
		{"no flows", nil, nil, math.NaN(), 0, false},
		{"idle and sampleless ignored", []ConsumerInput{idle, noSample, act(c1, 9)}, nil, 9, 1, false},
		{"write delay discounted", []ConsumerInput{act(c1, 10.5)}, map[netip.Addr]throttle.Setting{c1: {WriteDelay: 10 * time.Millisecond}}, 0.5, 1, true},
		{"read delay discounted", []ConsumerInput{act(c1, 10.5)}, map[netip.Addr]throttle.Setting{c1: {ReadDelay: 4 * time.Millisecond, WriteDelay: time.Millisecond}}, 6.5, 1, true},
		{"floored at zero (srtt lags a raised delay)", []ConsumerInput{act(c1, 3)}, map[netip.Addr]throttle.Setting{c1: {WriteDelay: 10 * time.Millisecond}}, 0, 1, true},
		{"unthrottled flow's own delay wins", []ConsumerInput{act(c1, 20), act(c2, 1.5)}, map[netip.Addr]throttle.Setting{c1: {WriteDelay: 10 * time.Millisecond}}, 1.5, 2, false},
		{"tie goes to the unthrottled flow", []ConsumerInput{act(c1, 11), act(c2, 1)}, map[netip.Addr]throttle.Setting{c1: {WriteDelay: 10 * time.Millisecond}}, 1, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nr := NetIndicator(tc.cs, tc.applied)
			q, n, disc := nr.QueueMs, nr.Flows, nr.Discounted
			if tc.applied == nil && !(nr.RawQueueMs == q || math.IsNaN(q) && math.IsNaN(nr.RawQueueMs)) {
				t.Fatalf("nothing throttled: raw %v != %v", nr.RawQueueMs, q)
			}
			if !(q == tc.want || math.IsNaN(q) && math.IsNaN(tc.want) || math.Abs(q-tc.want) < 1e-9) || n != tc.flows || disc != tc.disc {
				t.Fatalf("got %v ms over %d flows (discounted %v), want %v over %d (%v)", q, n, disc, tc.want, tc.flows, tc.disc)
			}
		})
	}
}

// resvInput is a 100 ms tick at t with the given consumers (wire rates in
// MB/s) and the network queueing delay seen by every flow.
func resvInput(t time.Time, diskOut time.Duration, queueMs float64, cs ...ConsumerInput) *PolicyInput {
	for i := range cs {
		cs[i].QueueMs = queueMs
	}
	return &PolicyInput{Now: t, Interval: 100 * time.Millisecond, Output: diskOut, DelayStep: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond,
		IndicatorMs: 5, ThresholdMs: 15, Consumers: cs}
}

func wire(a netip.Addr, rMBs, wMBs float64) ConsumerInput {
	return ConsumerInput{Addr: a, ReadBps: rMBs * 1e6, WriteBps: wMBs * 1e6, ReadIOPS: rMBs * 10, WriteIOPS: wMBs * 10}
}

// Relief goes in laxity order: on a congested link the non-reserved
// consumers that fill it first (largest first), then a reserved one that
// has met its reservation; never the reserved one at risk, never a light
// reader that does not fill the link, never an important one.
func TestReservationsReliefOrder(t *testing.T) {
	resv := addr("10.0.0.9") // reserved, at risk: 0.4 of 1 MB/s
	done := addr("10.0.0.8") // reserved 0.1 MB per s, moving 1 MB/s: met early in each period
	imp := wire(addr("10.0.0.7"), 0, 3)
	imp.Important = true
	p := Reservations([]Reservation{{Addr: resv, Amount: 1e6, Period: time.Second}, {Addr: done, Amount: 1e5, Period: time.Second}}, 2*time.Millisecond)
	t0 := time.Unix(1000, 0)
	var last PolicyOutput
	mk := func(i int) *PolicyInput {
		return resvInput(t0.Add(time.Duration(i)*100*time.Millisecond), 0, 40,
			wire(c1, 0, 1.2), wire(c2, 0, 0.8), wire(c3, 0.05, 0), wire(resv, 0, 0.4), wire(done, 0, 1), imp)
	}
	delays := func(in *PolicyInput, o PolicyOutput) map[netip.Addr]time.Duration {
		m := map[netip.Addr]time.Duration{}
		for a, s := range byAddr(in, o) {
			m[a] = max(s.ReadDelay, s.WriteDelay)
		}
		return m
	}
	var first []map[netip.Addr]time.Duration
	var in *PolicyInput
	for i := 0; i < 40; i++ {
		in = mk(i)
		last = p.Decide(in)
		first = append(first, delays(in, last))
	}
	// The first tick under pressure slows only the largest filler.
	if d := first[0]; len(d) != 1 || d[c1] != 500*time.Microsecond {
		t.Fatalf("first tick: %v, want only %v at one step", d, c1)
	}
	// Order of first throttling: c1, then c2, then the reserved one with
	// spare laxity.
	firstAt := map[netip.Addr]int{}
	for i, d := range first {
		for a := range d {
			if _, ok := firstAt[a]; !ok {
				firstAt[a] = i
			}
		}
	}
	if !(firstAt[c1] < firstAt[c2] && firstAt[c2] < firstAt[done]) {
		t.Fatalf("first throttled at ticks %v: want %v, then %v, then %v", firstAt, c1, c2, done)
	}
	d := delays(in, last)
	for _, a := range []netip.Addr{resv, c3, imp.Addr} {
		if d[a] != 0 {
			t.Fatalf("%v throttled (%v): at-risk reserved, light reader and important ones never are", a, d[a])
		}
	}
	if d[c1] != 20*time.Millisecond || d[c2] != 20*time.Millisecond {
		t.Fatalf("after 4 s of congestion the fillers should be at the maximum: %v", d)
	}
	ns := last.Network
	// 40 ms seen by all, 20 of it ours on the throttled flows: 20 ms left.
	if ns == nil || !ns.Congested || ns.AtRisk != 1 || float64(ns.QueueMs) != 20 || !ns.Discounted {
		t.Fatalf("network status %+v", ns)
	}
	// Status: 3 ended periods, the at-risk one met none, the other all.
	if r := last.Reservations; len(r) != 2 || r[0].Periods != 3 || r[0].PeriodsMet != 0 || r[1].PeriodsMet != 3 || !r[0].AtRisk || r[1].AtRisk {
		t.Fatalf("reservation status %+v", r)
	}
	// Congestion over and the reservation safe: relief is released.
	for i := 40; i < 120; i++ {
		in = resvInput(t0.Add(time.Duration(i)*100*time.Millisecond), 0, 0.2,
			wire(c1, 0, 1.2), wire(c2, 0, 0.8), wire(resv, 0, 1.3))
		last = p.Decide(in)
	}
	if set := byAddr(in, last); len(set) != 0 || last.Network.Level != 0 {
		t.Fatalf("still throttling after congestion ended: %v (level %d)", set, last.Network.Level)
	}
}

// Under disk saturation alone the heaviest writers are slowed, not the
// consumer with the most bytes (a reader), and a reader is slowed in its
// own direction.
func TestReservationsDiskSaturationRanksWriters(t *testing.T) {
	p := Reservations([]Reservation{{Addr: c4, Amount: 1, IOs: true, Period: time.Second}}, 2*time.Millisecond)
	in := resvInput(time.Unix(0, 0), 3*time.Millisecond, 0.1, wire(c1, 10, 0), wire(c2, 0, 4), wire(c3, 0, 0.5), wire(c4, 0, 0))
	out := p.Decide(in)
	if set := byAddr(in, out); len(set) != 1 || set[c2].WriteDelay == 0 {
		t.Fatalf("settings %v: want the heaviest writer %v first", set, c2)
	}
	if !out.Network.DiskSaturated || out.Network.Congested {
		t.Fatalf("network status %+v", out.Network)
	}
}

// With no congestion, no disk saturation and no reservation at risk,
// nobody is slowed; an idle reserved consumer is not at risk.
func TestReservationsIdleIsQuiet(t *testing.T) {
	p := Reservations([]Reservation{{Addr: c4, Amount: 1e6, Period: time.Second}}, 2*time.Millisecond)
	for i := 0; i < 30; i++ {
		in := resvInput(time.Unix(0, int64(i)*1e8), 0, 0.1, wire(c1, 0, 5), wire(c4, 0, 0))
		out := p.Decide(in)
		if set := byAddr(in, out); len(set) != 0 || out.Reservations[0].AtRisk {
			t.Fatalf("tick %d: %v, %+v", i, set, out.Reservations[0])
		}
	}
}

// The reservations policy's figures reach /metrics and pass promlint.
func TestReservationsMetrics(t *testing.T) {
	st := func() []ResourceStatus {
		return []ResourceStatus{{Name: "vg1", Network: &NetStatus{QueueMs: 38.5, ThresholdMs: 2},
			Reservations: []ReservationStatus{{Consumer: "10.99.0.2", LaxityPct: -1.5, Periods: 11, PeriodsMet: 8}}}}
	}
	c := newCollector(st, throttle.NewMemory())
	if probs, err := testutil.CollectAndLint(c); err != nil || len(probs) > 0 {
		t.Fatalf("promlint: %v %v", probs, err)
	}
	want := `
# HELP sanqos_reservation_periods_met_total Ended periods in which the reservation was attained.
# TYPE sanqos_reservation_periods_met_total counter
sanqos_reservation_periods_met_total{consumer="10.99.0.2",resource="vg1"} 8
# HELP sanqos_resource_net_queue_seconds Network indicator (reservations): queueing delay srtt − min_rtt of the least-delayed active flow, our own delay discounted.
# TYPE sanqos_resource_net_queue_seconds gauge
sanqos_resource_net_queue_seconds{resource="vg1"} 0.0385
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "sanqos_reservation_periods_met_total", "sanqos_resource_net_queue_seconds"); err != nil {
		t.Fatal(err)
	}
}
