package experiments

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// A cancelled run stops its load and its agents and returns the
// context's error, well before its phases would have ended: equal-share,
// the cheapest experiment (one 61 s phase of four readers, no agent),
// cancelled once its fio runs, and pid (short, one load cycle),
// cancelled while its agent regulates.
func TestRunCancelled(t *testing.T) {
	requireLab(t)
	if s, err := lab.LoadState(); err != nil || len(s.Health()) > 0 {
		upLab(t) // else the lab that is up, left as it is
	}
	buildSanqos(t)
	for _, tc := range []struct {
		name  string
		o     Options
		agent bool // cancel once an agent runs
	}{
		{name: "equal-share", o: Options{RunOptions: lab.RunOptions{Scale: 1}}},
		{name: "pid", o: Options{RunOptions: lab.RunOptions{Scale: 0.1}, Cycles: 1, Thresholds: []time.Duration{20 * time.Millisecond}}, agent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			results := t.TempDir()
			mine := func(what string) []int {
				return lab.FindProcs(func(argv []string) bool {
					return slices.Contains(argv, what) && slices.ContainsFunc(argv, func(a string) bool { return strings.HasPrefix(a, results) })
				})
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				tk := time.NewTicker(10 * time.Millisecond)
				defer tk.Stop()
				for lab.StepNow() != "run:phase" || (tc.agent && len(mine("agent")) == 0) {
					select {
					case <-ctx.Done():
						return
					case <-tk.C:
					}
				}
				cancel()
			}()
			tc.o.Repeat, tc.o.Results = 1, results
			t0 := time.Now()
			_, err := RunExperiment(ctx, tc.name, tc.o)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled run: %v, want %v", err, context.Canceled)
			}
			if d := time.Since(t0); d > 25*time.Second {
				t.Errorf("the cancelled run took %v: its phase was not stopped", d)
			}
			if left := append(mine("fio"), mine("agent")...); len(left) > 0 {
				t.Errorf("the cancelled run left fio or its agent running: pids %v", left)
			}
		})
	}
}
