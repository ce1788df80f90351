package experiments

import (
	"context"
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
	lr, err := lab.NewRunner(context.Background(), name, o.RunOptions)
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

// heldRun is what runHeldLoad read off its run.
type heldRun struct {
	res *lab.PhaseResult
	// during is who was throttled a second before the writers stopped,
	// after the count still throttled half a second before the end, and
	// held those of them whose delays the agent holds while they are
	// idle (idle_hold: they move nothing, so nothing is slowed).
	during      []string
	after, held int
}

// heldStatus is the part of the agent's status that says which
// consumers' delays are held while idle.
type heldStatus struct {
	Resources []struct {
		Consumers []struct {
			Addr string `json:"addr"`
			Held bool   `json:"held"`
		} `json:"consumers"`
	} `json:"resources"`
}

// The load an agent test regulates: the reader throughout, 12 writers
// after a lead, and a pause after them.
const heldLead, heldWriting, heldAfter = 3 * time.Second, 20 * time.Second, 6 * time.Second

// runHeldLoad runs the reader and 12 writers in phase name with agent a
// on (and events, if any), and checks what every agent test asks of it:
// in the second half of the writers' window, when the controller has had
// 10 s, the reader's mean wait is within 1.25 × thr and the writers are
// not starved; after the load ends nothing is throttled but consumers
// the agent holds while they are idle (which slows nothing). what names
// the agent in the messages.
func runHeldLoad(t *testing.T, r *runner, a *lab.LabAgent, name, label, what string, thr time.Duration, events ...lab.Event) heldRun {
	t.Helper()
	const lead, writing, after = heldLead, heldWriting, heldAfter
	p := &lab.Phase{Name: name, Label: label, Length: lead + writing + after, From: lead, To: lead + writing,
		Jobs: append([]lab.Job{r.reader(lead + writing + after)}, r.writers(12, lead, writing)...)}
	var h heldRun
	p.Events = append(events,
		lab.Event{At: lead + writing - time.Second, Name: "check during", Do: func() error {
			m, err := a.List()
			for c := range m {
				h.during = append(h.during, c.String())
			}
			return err
		}},
		lab.Event{At: lead + writing + after - 500*time.Millisecond, Name: "check after", Do: func() error {
			m, err := a.List()
			if err != nil {
				return err
			}
			var st heldStatus
			if err := a.Status(&st); err != nil {
				return err
			}
			held := map[string]bool{}
			for _, r := range st.Resources {
				for _, c := range r.Consumers {
					held[c.Addr] = held[c.Addr] || c.Held
				}
			}
			for c := range m {
				if held[c.String()] {
					h.held++
				} else {
					h.after++
				}
			}
			return nil
		}},
	)
	res, err := r.Run(p, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.res = res
	late, reads := readerWaitOver(res, lead+writing/2, lead+writing)
	if reads == 0 {
		t.Errorf("the reader completed no read in the 2nd half of the load: its wait was not measured")
	}
	wr := 0.0
	for _, host := range lab.Hosts[1:] {
		wr += meanOver(res, host, lead+writing/2, lead+writing, writeMBs)
	}
	t.Logf("reader wait (diskstats) in the 2nd half of the load: %.1f ms (threshold %v); writes %.1f MB/s; throttled during %v, after %d (and %d held while idle); tcp %+v",
		late, thr, wr, h.during, h.after, h.held, res.TCP)
	if late > 1.25*float64(thr)/1e6 {
		t.Errorf("reader's mean wait %.1f ms is above 1.25 × threshold %v with the %s on", late, thr, what)
	}
	if h.after != 0 {
		t.Errorf("%d consumers still throttled %v after the load ended, not held while idle", h.after, after)
	}
	if wr < 5 {
		t.Errorf("writers starved: %.1f MB/s", wr)
	}
	return h
}
