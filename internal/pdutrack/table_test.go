package pdutrack

import (
	"testing"
	"time"
)

// The table's caps and its counters, which both trackers report.
func TestTable(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tab := NewTable[string, int, bool, string](1, 2, func() bool { return false })
	c := tab.Conn("a", t0)
	if tab.Conn("b", t0) != nil {
		t.Fatal("a second flow past MaxFlows 1 was tracked")
	}
	tab.Start(c, 1, "r", t0)
	tab.Start(c, 2, "w", t0)
	tab.Start(c, 2, "w2", t0.Add(time.Millisecond)) // a repeated tag replaces
	tab.Start(c, 3, "x", t0)                        // past MaxOutstanding 2
	if p, lat, ok := tab.Finish(c, 2, t0.Add(3*time.Millisecond)); !ok || p != "w2" || lat != 2*time.Millisecond {
		t.Fatalf("finish 2: %q %v %v", p, lat, ok)
	}
	if _, _, ok := tab.Finish(c, 3, t0); ok {
		t.Fatal("a dropped command completed")
	}
	tab.Expire(t0.Add(time.Minute), time.Second, func(kept bool) bool { return !kept }) // kept: command 1 expires, the flow stays
	if len(tab.Flows) != 1 || c.Outstanding() != 0 {
		t.Fatalf("after Expire with keep: %d flows, %d outstanding", len(tab.Flows), c.Outstanding())
	}
	tab.Expire(t0.Add(time.Minute), time.Second, nil)
	want := Counters{Completed: 1, Unmatched: 1, Dropped: 1, Expired: 1, FlowsRefused: 1}
	if tab.Counters != want || len(tab.Flows) != 0 {
		t.Fatalf("counters %+v, want %+v; %d flows", tab.Counters, want, len(tab.Flows))
	}
	s := Stats[int]{}
	s.Add(1, time.Millisecond)
	s.Add(1, 3*time.Millisecond)
	if got := s.Take(); got[1] != (Stat{Count: 2, Sum: 4 * time.Millisecond, Max: 3 * time.Millisecond}) || got[1].Mean() != 2*time.Millisecond || len(s) != 0 {
		t.Fatalf("stats %+v, left %d", got, len(s))
	}
}
