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

// A cancelled run stops its load and returns the context's error, well
// before its phase would have ended: equal-share, the cheapest
// experiment (one phase of four readers, no agent), at scale 1 (a 61 s
// phase), cancelled once its fio runs.
func TestRunCancelled(t *testing.T) {
	requireLab(t)
	if s, err := lab.LoadState(); err != nil || len(s.Health()) > 0 {
		upLab(t) // else the lab that is up, left as it is
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for lab.StepNow() != "run:phase" {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
		}
		cancel()
	}()
	results := t.TempDir()
	t0 := time.Now()
	_, err := RunExperiment(ctx, "equal-share", Options{RunOptions: lab.RunOptions{Scale: 1, Repeat: 1, Results: results}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v, want %v", err, context.Canceled)
	}
	if d := time.Since(t0); d > 20*time.Second {
		t.Errorf("the cancelled run took %v: its 61 s phase was not stopped", d)
	}
	fio := lab.FindProcs(func(argv []string) bool {
		return slices.ContainsFunc(argv, func(a string) bool { return strings.HasPrefix(a, results) })
	})
	if len(fio) > 0 {
		t.Errorf("the cancelled run left fio running: pids %v", fio)
	}
}
