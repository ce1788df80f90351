package experiments

import (
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// A phase's reads become its figures: each read inside the window
// counted once, windows of 100 ms of completions, a slow window one
// whose mean read is over the limit.
func TestIdlePhase(t *testing.T) {
	reads := []lab.ReaderIO{
		{T: 0.5, Ms: 5},                                      // before From: left out
		{T: 1.01, Ms: 7}, {T: 1.04, Ms: 7}, {T: 1.07, Ms: 7}, // window 10: mean 7
		{T: 1.19, Ms: 98}, {T: 1.195, Ms: 7}, // window 11: mean 52.5, one slow read
		{T: 1.23, Ms: 8}, // window 12: mean 8
		{T: 2.5, Ms: 7},  // after To: left out
	}
	res := &lab.PhaseResult{Phase: &lab.Phase{From: time.Second, To: 2 * time.Second}, Reader: reads}
	p := idlePhase(res, 14)
	if p.Reads != 6 || p.ReadsOver30Ms != 1 || p.Read.Max != 98 || p.Read.P50 != 7 {
		t.Errorf("reads %d (want 6), over 30 ms %d (want 1), max %v, p50 %v", p.Reads, p.ReadsOver30Ms, p.Read.Max, p.Read.P50)
	}
	if p.Windows != 3 || p.WindowsOverLimitPct != 33.33 || p.WindowsOver30MsPct != 33.33 {
		t.Errorf("windows %d, over limit %v %%, over 30 ms %v %%: want 3, 33.33, 33.33", p.Windows, p.WindowsOverLimitPct, p.WindowsOver30MsPct)
	}
}
