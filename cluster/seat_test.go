package cluster

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sanqos/sanqos/control"
)

// seatEvent is one thing that happens to agent "a" on resource res, as
// etcd or its own loop would deliver it.
type seatEvent struct {
	at   time.Duration
	kind string // tick, record, indicator, forget, elected, campaign, renew, failRenew, fixCtrl, look
	res  string
	// tick: the local step; indicator: the agent's indicator.
	local int
	ind   Indicator
	// record: the shared record, live or read.
	rec  Shared
	live bool
	// indicator, forget: whose.
	agent string
	// look: the election line each read resource has (a first).
	lines map[string][]Candidate
}

// nodeDriver is a Node without etcd, driven through its own methods; do
// says what came of an event, in the same words as seatsDriver's.
type nodeDriver struct {
	n        *Node
	requeues int
	fail     bool
}

// seatsDriver is bare Seats, driven through the calls package sim makes.
type seatsDriver struct {
	seats       map[string]*Seat
	campaigning map[string]bool
	requeues    int
	fail        bool
}

const seatID = "a"

func seatTiming() Timing { return Timing{Fresh: testFresh, Decay: testDecay, Blend: testBlend} }

func newCtrl(fail bool) (control.Controller, error) {
	if fail {
		return nil, errors.New("no policy")
	}
	return testPID("")
}

// renews applies the script's switch of controller building (failRenew:
// the next controllers cannot be built; fixCtrl: they can) and says
// whether the event renews the leaders' controllers.
func renews(kind string, fail *bool) bool {
	switch kind {
	case "fixCtrl":
		*fail = false
		return false
	case "failRenew":
		*fail = true
	}
	return true
}

func pending(s *Seat) string {
	if s.Pending == nil {
		return "-"
	}
	p := s.Pending
	return fmt.Sprintf("seq %d step %d agents %d yield %s@%d", p.Seq, p.Step, p.Agents, p.Yield, p.YieldRev)
}

func (d *nodeDriver) do(ev seatEvent, now time.Time) string {
	n := d.n
	if ev.kind == "tick" {
		ind := ev.ind
		ind.LocalStep = ev.local
		n.Publish(ev.res, ind, now)
		step, mode := n.Delay(ev.res, ev.local, now)
		n.mu.Lock()
		defer n.mu.Unlock()
		return fmt.Sprintf("step %d %s pending %s", step, mode, pending(&n.res[ev.res].Seat))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	rs := n.res[ev.res] // every resource is there from the start: no watch starts
	switch ev.kind {
	case "record":
		b, _ := EncodeShared(&ev.rec)
		n.apply(rs, DelayKey(n.cfg.Prefix, ev.res), b, ev.live)
	case "indicator":
		b, _ := EncodeIndicator(ev.ind, now)
		n.apply(rs, AgentKey(n.cfg.Prefix, ev.res, ev.agent), b, ev.live)
	case "forget":
		n.remove(rs, AgentKey(n.cfg.Prefix, ev.res, ev.agent))
	case "elected":
		ctrl, _ := newCtrl(false)
		n.elected(rs, &concurrency.Election{}, ctrl, func() {})
	case "campaign":
		rs.requeue = func() { d.requeues++ }
	case "renew", "failRenew", "fixCtrl":
		if renews(ev.kind, &d.fail) {
			n.mu.Unlock()
			n.Renew()
			n.mu.Lock()
		}
	case "look":
		n.mu.Unlock()
		out := d.look(ev, now)
		n.mu.Lock()
		return out
	}
	return d.state(rs)
}

func (d *nodeDriver) state(rs *resState) string {
	if rs == nil {
		return fmt.Sprintf("requeues %d", d.requeues)
	}
	return fmt.Sprintf("requeues %d agents %d heard %d", d.requeues, len(rs.Agents), len(rs.Heard))
}

// look is Node.balance with the election reads taken from the event.
func (d *nodeDriver) look(ev seatEvent, now time.Time) string {
	n := d.n
	look, cands, sess := n.pick(now)
	var got []string
	for _, c := range cands {
		h, ok := n.decide(look, c, sess, ev.lines[c.rs.name])
		got = append(got, fmt.Sprintf("%s→%q", c.rs.name, h.next))
		if ok {
			n.mu.Lock()
			c.rs.requeue = func() { d.requeues++ } // campaigning again, behind the taker
			n.mu.Unlock()
		}
	}
	return lookResult(look, got)
}

// lookResult is a look's load and its decisions by resource. Resources
// read least recently come first, but the Node's order among resources
// read equally recently is its map's, so the decisions are compared
// sorted (the script hands over only where the order is fixed).
func lookResult(l *Look, decisions []string) string {
	slices.Sort(decisions)
	return fmt.Sprintf("load %d %.4f: %s", l.Leads(), l.Share(), strings.Join(decisions, " "))
}

func (d *seatsDriver) seat(res string) *Seat {
	if d.seats[res] == nil {
		s := NewSeat()
		d.seats[res] = &s
	}
	return d.seats[res]
}

func (d *seatsDriver) do(ev seatEvent, now time.Time) string {
	s := d.seats[ev.res]
	switch ev.kind {
	case "tick":
		s.Ind = ev.ind
		s.Ind.LocalStep = ev.local
		step, mode, _, _ := s.Tick(seatID, ev.local, seatTiming(), control.DefaultStep, now,
			func() (control.Controller, error) { return newCtrl(d.fail) })
		return fmt.Sprintf("step %d %s pending %s", step, mode, pending(s))
	case "record":
		b, _ := EncodeShared(&ev.rec)
		rec, _ := DecodeShared(b)
		if s.Receive(rec, ev.live, now, seatID, d.campaigning[ev.res]) {
			d.requeues++
		}
	case "indicator":
		b, _ := EncodeIndicator(ev.ind, now)
		ind, _ := DecodeIndicator(b)
		s.Hear(ev.agent, ind, ev.live, now)
	case "forget":
		s.Forget(ev.agent)
	case "elected":
		ctrl, _ := newCtrl(false)
		s.Elected(ctrl, now)
		d.campaigning[ev.res] = false
	case "campaign":
		d.campaigning[ev.res] = true
	case "renew", "failRenew", "fixCtrl":
		if renews(ev.kind, &d.fail) {
			for _, x := range d.seats {
				x.Renew()
			}
		}
	case "look":
		return d.look(ev, now)
	}
	if s == nil {
		return fmt.Sprintf("requeues %d", d.requeues)
	}
	return fmt.Sprintf("requeues %d agents %d heard %d", d.requeues, len(s.Agents), len(s.Heard))
}

// look is package sim's balance: slots in a fixed order.
func (d *seatsDriver) look(ev seatEvent, now time.Time) string {
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range d.seats {
			if !yield(k) {
				return
			}
		}
	})
	look := NewLook(seatID, func(yield func(*Seat) bool) {
		for _, k := range names {
			if !yield(d.seats[k]) {
				return
			}
		}
	}, testFresh)
	var got []string
	for _, k := range PickReads(look, slices.Values(names), d.seat, DefaultBalanceHold, now) {
		next, _, _ := look.Decide(d.seats[k], ev.lines[k], now)
		got = append(got, fmt.Sprintf("%s→%q", k, next))
		if next != "" {
			d.campaigning[k] = true
		}
	}
	return lookResult(look, got)
}

// seatScript is an agent leading r0–r5 and following r6 for 3 s: ticks
// every 100 ms, other agents' indicators coming and going, records asking
// it to step back, a renewal whose controller cannot be built, and
// balancer looks that ask the next in line to yield and hand resources
// over.
func seatScript() []seatEvent {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	heavy, light := Indicator{Leads: 6, Share: 2, WaitMs: 9}, Indicator{Leads: 0, Share: 2, WaitMs: 11}
	var evs []seatEvent
	add := func(at int, ev seatEvent) { ev.at = ms(at); evs = append(evs, ev) }
	for i := range 6 {
		res := fmt.Sprint("r", i)
		add(i, seatEvent{kind: "elected", res: res})
		add(50, seatEvent{kind: "indicator", res: res, agent: "b", ind: heavy, live: true})
	}
	add(0, seatEvent{kind: "campaign", res: "r6"})
	c := func(at int, res ...string) {
		for _, r := range res {
			add(at, seatEvent{kind: "indicator", res: r, agent: "c", ind: light, live: true})
		}
	}
	rec := func(at int, seq uint64, live bool, yieldRev int64) {
		add(at, seatEvent{kind: "record", res: "r6", live: live,
			rec: Shared{Seq: seq, Leader: "x", Time: time.Unix(1000, 0).Add(ms(at)), Step: int(seq) * 3, Agents: 3, Yield: seatID, YieldRev: yieldRev}})
	}
	rec(150, 1, false, 0)
	rec(250, 2, true, 10) // steps back
	rec(350, 3, true, 10) // the same request: no
	rec(450, 4, true, 11) // a new one
	c(50, "r0")
	ab, ac := []Candidate{{ID: "a"}, {ID: "b"}, {ID: "c"}}, []Candidate{{ID: "a"}, {ID: "c"}, {ID: "b"}}
	line := func(ls map[string][]Candidate) seatEvent { return seatEvent{kind: "look", lines: ls} }
	c(1150, "r0")
	add(1200, line(map[string][]Candidate{"r0": ab})) // yield b
	c(1350, "r0", "r1")
	add(1400, line(map[string][]Candidate{"r0": ab, "r1": ac})) // r1 to c
	add(1450, seatEvent{kind: "failRenew"})
	add(1650, seatEvent{kind: "fixCtrl"})
	c(1550, "r0", "r2", "r3")
	add(1600, line(map[string][]Candidate{"r0": ab, "r2": ab, "r3": ab}))
	add(1700, seatEvent{kind: "forget", res: "r0", agent: "c"})
	add(1700, seatEvent{kind: "renew"})
	c(1750, "r2", "r3", "r4")
	add(1800, line(map[string][]Candidate{"r2": ab, "r3": ab, "r4": ac})) // r4 to c
	c(2350, "r2", "r5")
	add(2400, line(map[string][]Candidate{"r2": ac, "r5": ab})) // r2 to c
	rec(2500, 5, true, 12)
	for t := 0; t <= 3000; t += 100 {
		for i := range 7 {
			add(t+5, seatEvent{kind: "tick", res: fmt.Sprint("r", i), local: (t/100*7 + i*3) % 15,
				ind: Indicator{WaitMs: 6 + float64((t/100+i)%6)*2, ReadBps: 1e6}})
		}
	}
	slices.SortStableFunc(evs, func(x, y seatEvent) int { return int(x.at - y.at) })
	return evs
}

// TestNodeAndSimulatorRulesAgree feeds the same events to a Node (no etcd:
// its watch, publisher and election callbacks called directly) and to
// bare Seats driven the way package sim drives them, and compares what
// each decides at every event: applied steps and modes, the records the
// leader queues (sequence, step, yield), steps back, balancer picks and
// handovers. Node may add etcd and logging around the rules, never a rule.
func TestNodeAndSimulatorRulesAgree(t *testing.T) {
	t0 := time.Unix(1000, 0)
	clock := t0
	nd := &nodeDriver{}
	nd.n = &Node{cfg: Config{AgentID: seatID, Prefix: DefaultPrefix, Fresh: testFresh, Decay: testDecay, Blend: testBlend,
		Step: control.DefaultStep, BalanceHold: DefaultBalanceHold, Log: discard(), Now: func() time.Time { return clock },
		NewController: func(string) (control.Controller, error) { return newCtrl(nd.fail) }},
		res: map[string]*resState{}, session: &concurrency.Session{}}
	sd := &seatsDriver{seats: map[string]*Seat{}, campaigning: map[string]bool{}}
	for i := range 7 {
		res := fmt.Sprint("r", i)
		nd.n.res[res] = &resState{name: res, Seat: NewSeat()}
		sd.seat(res)
	}
	var handovers, yields, records int
	for i, ev := range seatScript() {
		clock = t0.Add(ev.at)
		a, b := nd.do(ev, clock), sd.do(ev, clock)
		if a != b {
			t.Fatalf("event %d (%s %s at %v):\n node %s\n sim  %s", i, ev.kind, ev.res, ev.at, a, b)
		}
		handovers += strings.Count(a, `→"c"`)
		if strings.Contains(a, "yield b@") {
			yields++
		}
		if strings.Contains(a, "pending seq") {
			records++
		}
	}
	// The script must reach what it is about.
	if handovers != 3 || yields == 0 || records == 0 || nd.requeues != 3 {
		t.Errorf("script did not exercise the rules: %d handovers, %d ticks with a yield, %d with a record, %d steps back",
			handovers, yields, records, nd.requeues)
	}
}

// PickReads takes at most handOverReads, least recently read first.
func TestPickReadsBoundsAndOrder(t *testing.T) {
	now := time.Unix(2000, 0)
	light := Indicator{Leads: 0, Share: 2}
	var seats []*Seat
	for i := range 6 {
		s := NewSeat()
		s.Leading, s.Since = true, now.Add(-time.Hour)
		s.Looked = now.Add(-time.Duration(i+1) * time.Second) // s5 read longest ago
		s.Hear("c", light, true, now)
		seats = append(seats, &s)
	}
	quiet := NewSeat()
	quiet.Leading, quiet.Since, quiet.Yield = true, now.Add(-time.Hour), Candidate{ID: "b"}
	seats = append(seats, &quiet)
	l := NewLook(seatID, slices.Values(seats), testFresh)
	got := PickReads(l, slices.Values(seats), func(s *Seat) *Seat { return s }, time.Second, now)
	if len(got) != handOverReads || got[0] != seats[5] || got[3] != seats[2] {
		t.Errorf("picked %d, want seats 5, 4, 3, 2", len(got))
	}
	if got[0].Looked != now || seats[0].Looked == now {
		t.Error("picked seats not marked read, or others marked")
	}
	if quiet.Yield != (Candidate{}) {
		t.Error("a seat with no lighter agent keeps its yield")
	}
}
