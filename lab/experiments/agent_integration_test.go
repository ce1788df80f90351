package experiments

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// startLabAgent brings the lab up, builds sanqos and starts an agent on
// the config write produces, for a test that then drives load through r;
// the agent is stopped and r closed when the test ends.
func startLabAgent(t *testing.T, name string, write func(r *runner, cfg string) error, start func(r *runner, cfg string) (*lab.LabAgent, error)) (*runner, *lab.LabAgent) {
	t.Helper()
	upLab(t)
	buildSanqos(t)
	o := Options{RunOptions: lab.RunOptions{Scale: 1, Results: t.TempDir()}}
	lr, err := lab.NewRunner(name, o.RunOptions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lr.Close() })
	r := wrap(lr, o)
	cfg := filepath.Join(r.Dir, "agent.yaml")
	if err := write(r, cfg); err != nil {
		t.Fatal(err)
	}
	a, err := start(r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop() })
	return r, a
}

// The autonomic agent, given only a 15 ms threshold, brings the reader's
// wait back under it while 12 writers run, and lifts every throttle after
// they stop.
func TestAutonomicAgentHoldsThresholdInLab(t *testing.T) {
	thr := 15 * time.Millisecond
	r, a := startLabAgent(t, "agent-test",
		func(r *runner, cfg string) error { return r.agentConfig(cfg, thr, true) },
		func(r *runner, cfg string) (*lab.LabAgent, error) {
			return lab.StartAgent("delayline", r.Dir, "--config", cfg)
		})
	const lead, writing, after = 3 * time.Second, 20 * time.Second, 6 * time.Second
	p := &lab.Phase{Name: "autonomic", Label: "agent on", Length: lead + writing + after, From: lead, To: lead + writing,
		Jobs: append([]lab.Job{r.reader(lead + writing + after)}, r.writers(12, lead, writing)...)}
	var throttledDuring, throttledAfter int
	p.Events = []lab.Event{
		{At: lead + writing - time.Second, Name: "check during", Do: func() error {
			m, err := a.List()
			throttledDuring = len(m)
			return err
		}},
		{At: lead + writing + after - 500*time.Millisecond, Name: "check after", Do: func() error {
			m, err := a.List()
			throttledAfter = len(m)
			return err
		}},
	}
	res, err := r.Run(p, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The second half of the writers' window: the controller has had 10 s.
	late := meanOver(res, "b2", lead+writing/2, lead+writing, readWait)
	wr := 0.0
	for _, h := range lab.Hosts[1:] {
		wr += meanOver(res, h, lead+writing/2, lead+writing, writeMBs)
	}
	t.Logf("reader wait in the 2nd half of the load: %.1f ms (threshold %v); writes %.1f MB/s; throttled during %d, after %d; tcp %+v",
		late, thr, wr, throttledDuring, throttledAfter, res.TCP)
	if late > 1.25*float64(thr)/1e6 {
		t.Errorf("reader's mean wait %.1f ms is above 1.25 × threshold %v with the agent on", late, thr)
	}
	if throttledDuring != 3 {
		t.Errorf("throttled %d consumers under load, want the 3 writers (b3..b5), never the reader", throttledDuring)
	}
	if throttledAfter != 0 {
		t.Errorf("%d consumers still throttled %v after the load ended", throttledAfter, after)
	}
	if wr < 5 {
		t.Errorf("writers starved: %.1f MB/s", wr)
	}
}
