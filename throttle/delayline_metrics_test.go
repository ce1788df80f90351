package throttle

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeTotals is the delay line's counters without netfilter.
type fakeTotals struct{}

func (fakeTotals) Counters() map[netip.Addr]DelayCounters {
	return map[netip.Addr]DelayCounters{netip.MustParseAddr("10.99.0.3"): {Packets: 10, Bytes: 660, Acks: 9, PassedAtLimit: 1}}
}

func (fakeTotals) Stats() DelayLineStats {
	l := Lateness{Count: 3, Sum: 5100 * time.Microsecond, Max: 5 * time.Millisecond}
	l.Counts[0], l.Counts[2], l.Counts[7] = 1, 1, 1 // 40 µs, 60 µs, 5 ms
	return DelayLineStats{Held: 3, Unclassified: 2, Errors: 0, Late: l}
}

// The delay line's collector (its registry entry's) exports its counters
// under the names the dashboard uses, and only the delay line has one.
func TestDelayLineCollector(t *testing.T) {
	c := newDLCollector(fakeTotals{})
	if probs, err := testutil.CollectAndLint(c); err != nil || len(probs) > 0 {
		t.Fatalf("promlint: %v %v", probs, err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	want := `# HELP sanqos_delayline_packets_total Packets held by the delay line.
# TYPE sanqos_delayline_packets_total counter
sanqos_delayline_packets_total{consumer="10.99.0.3"} 10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sanqos_delayline_packets_total"); err != nil {
		t.Error(err)
	}
	got, err := testutil.GatherAndCount(reg)
	if err != nil || got != 8 {
		t.Errorf("%d metrics (%v), want 8: four per consumer, four totals", got, err)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "sanqos_delayline_release_lateness_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 3 || h.GetBucket()[0].GetCumulativeCount() != 1 || h.GetBucket()[7].GetCumulativeCount() != 3 {
				t.Errorf("lateness histogram %v", h)
			}
		}
	}
	if CollectorOf(NewMemory()) != nil {
		t.Error("dry-run has a collector")
	}
}
