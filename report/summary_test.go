package report

import (
	"reflect"
	"testing"
)

// The criteria carry each regulated run's TCP counters beside the
// baseline's, host-queue skips included, and the counters' arithmetic
// keeps every field (phase totals are differences of cumulative reads).
func TestJudgeTCPCriteria(t *testing.T) {
	base := TCPCounters{RetransSegs: 6, LossProbes: 6, DSACKRecv: 6, HostQueueSkips: 0}
	reg := TCPCounters{RetransSegs: 2, LossProbes: 2, DSACKRecv: 2, Timeouts: 1, HostQueueSkips: 141}
	s := ControlledSummary{
		Baseline:  ControlledRun{TCP: base},
		Regulated: []ControlledRun{{ThresholdMs: 15, ReadWaitMs: Dist{P95: 17.25}, TCP: reg}},
	}
	s.Judge()
	c := s.Regulated[0].Criteria
	if c == nil {
		t.Fatal("no criteria")
	}
	want := Criteria{P95X: 1.15, Retrans: 2, LossProbes: 2, Timeouts: 1, HostQueueSkips: 141, BaselineRetrans: 6, BaselineLossProbes: 6}
	if c.P95X != want.P95X || c.Retrans != want.Retrans || c.LossProbes != want.LossProbes || c.Timeouts != want.Timeouts ||
		c.HostQueueSkips != want.HostQueueSkips || c.BaselineRetrans != want.BaselineRetrans ||
		c.BaselineLossProbes != want.BaselineLossProbes || c.BaselineHostQueueSkips != want.BaselineHostQueueSkips {
		t.Errorf("criteria %+v, want %+v", *c, want)
	}

	sum := base.Add(reg)
	if sum != (TCPCounters{RetransSegs: 8, LossProbes: 8, DSACKRecv: 8, Timeouts: 1, HostQueueSkips: 141}) {
		t.Errorf("Add = %+v", sum)
	}
	if d := sum.Sub(base); d != reg {
		t.Errorf("Sub = %+v, want %+v", d, reg)
	}
}

// The initiator's p95 rides beside the target's, as multiples of the
// threshold: its 100 ms windows' (the target's statistic) and its reads'.
// A run without the initiator's figures (the simulator's) has neither.
func TestJudgeInitiatorCriteria(t *testing.T) {
	s := ControlledSummary{Regulated: []ControlledRun{
		{ThresholdMs: 15, ReadWaitMs: Dist{P95: 16.5}, Initiator: &InitiatorLatency{ReadMs: Dist{P95: 63}, WindowMs: Dist{P95: 33}}},
		{ThresholdMs: 20, ReadWaitMs: Dist{P95: 21}},
	}}
	s.Judge()
	if c := s.Regulated[0].Criteria; c.P95X != 1.1 || c.InitiatorP95X != 2.2 || c.InitiatorReadP95X != 4.2 {
		t.Errorf("criteria %+v: want p95 1.1×, initiator 2.2× (windows) and 4.2× (reads)", *c)
	}
	if c := s.Regulated[1].Criteria; c.InitiatorP95X != 0 || c.InitiatorReadP95X != 0 {
		t.Errorf("criteria %+v: want no initiator figures", *c)
	}
}

// The oracle's own p95 rides beside the kept-vs-oracle ratios, so a ratio
// against a static delay that missed the threshold reads as such. Figures
// from the lab's s1-r1-449aaf3 runs (2026-11-28): the mixed oracle's run at
// 15 ms held 43 ms of delay and still had a 28.15 ms p95.
func TestJudgeOracleCriteria(t *testing.T) {
	for _, tc := range []struct {
		name            string
		reg, oracle     ControlledRun
		thr             float64
		p95x, oracleP95 float64
		kept, moved     float64
		held            bool // the oracle's run within OracleHoldsX
	}{
		{"mixed 15 ms, oracle missed", ControlledRun{ReadWaitMs: Dist{P95: 16.33}, WriteMBs: 0.74, ReadMBs: 0.9},
			ControlledRun{ReadWaitMs: Dist{P95: 28.15}, WriteMBs: 0.93, ReadMBs: 1.12}, 15, 1.09, 1.88, 0.796, 0.8, false},
		{"readers 20 ms", ControlledRun{ReadWaitMs: Dist{P95: 22.75}, ReadMBs: 24.53},
			ControlledRun{ReadWaitMs: Dist{P95: 24}, ReadMBs: 24.57}, 20, 1.14, 1.2, 0, 0.998, false},
		{"writers 15 ms, oracle held", ControlledRun{ReadWaitMs: Dist{P95: 15}, WriteMBs: 11.58},
			ControlledRun{ReadWaitMs: Dist{P95: 14.7}, WriteMBs: 12.05}, 15, 1, 0.98, 0.961, 0, true},
	} {
		reg := tc.reg
		reg.ThresholdMs = tc.thr
		s := ControlledSummary{Baseline: ControlledRun{WriteMBs: 20, ReadMBs: 30}, Regulated: []ControlledRun{reg},
			Oracle: []OracleRun{{ThresholdMs: tc.thr, Reachable: true, Run: &tc.oracle}}}
		s.Judge()
		c := s.Regulated[0].Criteria
		if c.P95X != tc.p95x || c.OracleP95X != tc.oracleP95 || c.KeptVsOracle != tc.kept || c.MovedKeptVsOracle != tc.moved {
			t.Errorf("%s: p95 %v oracle's %v kept %v moved %v; want %v %v %v %v", tc.name, c.P95X, c.OracleP95X,
				c.KeptVsOracle, c.MovedKeptVsOracle, tc.p95x, tc.oracleP95, tc.kept, tc.moved)
		}
		if h := s.Oracle[0].Held; h != tc.held {
			t.Errorf("%s: oracle held %v, want %v", tc.name, h, tc.held)
		}
	}
}

// Add and Sub go through counters(), so a field missing from it would be
// dropped from every phase's difference without a word: the list must be
// the struct's fields, in order.
func TestTCPCountersListsEveryField(t *testing.T) {
	var c TCPCounters
	v := reflect.ValueOf(&c).Elem()
	ps := c.counters()
	if len(ps) != v.NumField() {
		t.Fatalf("counters() lists %d fields, TCPCounters has %d", len(ps), v.NumField())
	}
	for i, p := range ps {
		if f := v.Field(i); f.Addr().Interface() != p {
			t.Errorf("counters()[%d] is not field %s", i, v.Type().Field(i).Name)
		}
	}
	a, b := TCPCounters{}, TCPCounters{}
	for i := range v.NumField() {
		reflect.ValueOf(&a).Elem().Field(i).SetUint(uint64(10 * (i + 1)))
		reflect.ValueOf(&b).Elem().Field(i).SetUint(uint64(i + 1))
	}
	sum, diff := a.Add(b), a.Sub(b)
	for i := range v.NumField() {
		s, d := reflect.ValueOf(sum).Field(i).Uint(), reflect.ValueOf(diff).Field(i).Uint()
		if s != uint64(11*(i+1)) || d != uint64(9*(i+1)) {
			t.Errorf("%s: sum %d, difference %d; want %d, %d", v.Type().Field(i).Name, s, d, 11*(i+1), 9*(i+1))
		}
	}
}
