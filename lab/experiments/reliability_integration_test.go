package experiments

import (
	"testing"

	"github.com/sanqos/sanqos/lab"
)

// Every fault of the reliability experiment, injected in the real lab:
// the agent fails open on kill -9 with fio's verified data intact, a
// restarted agent or `sanqos cleanup` removes a crashed one's rules,
// tgtd restarts, address changes, LUN and device removal and clock steps
// leave it running and throttling only what exists, the delay line at its
// maximum delay causes no loss, and a short soak stays flat. Each row
// asserts its own expectation; this test fails on any row that did not.
func TestReliabilityFaultsInLab(t *testing.T) {
	upLab(t)
	buildSanqos(t)
	r, err := lab.NewRunner("reliability", lab.RunOptions{Scale: 0.03, Results: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out, err := runReliability(wrap(r, Options{}))
	sum := out.(ReliabilitySummary)
	for _, f := range sum.Faults {
		t.Logf("%s: %s [tcp %+v, warnings %d]", f.Name, f.Result, f.TCP, f.LogLines)
		if !f.Pass {
			t.Errorf("%s: expected %q; got %s", f.Name, f.Expect, f.Result)
		}
	}
	if len(sum.Faults) != 12 {
		t.Errorf("%d faults ran, want 12", len(sum.Faults))
	}
	if err != nil && sum.Pass {
		t.Error(err)
	}
}
