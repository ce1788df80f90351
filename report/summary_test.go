package report

import "testing"

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
