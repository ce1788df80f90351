package experiments

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// StatusSample is one poll of the agent's status during a phase: what
// status.jsonl holds, one per line.
type StatusSample struct {
	Phase   string              `json:"phase"`
	T       float64             `json:"t_s"`
	Classes []agent.ClassStatus `json:"classes,omitempty"`
	// Delays are the write and read delays the agent applied, ms, by
	// consumer address.
	WriteDelayMs map[string]float64 `json:"write_delay_ms,omitempty"`
	ReadDelayMs  map[string]float64 `json:"read_delay_ms,omitempty"`
	// IndicatorMs is the resource's smoothed read wait.
	IndicatorMs agent.JSONFloat `json:"indicator_ms"`
}

// statusPoller returns events that poll the agent's status every 500 ms
// of a phase into *out.
func statusPoller(a *lab.LabAgent, phase string, length time.Duration, out *[]StatusSample) []lab.Event {
	var ev []lab.Event
	for t := 500 * time.Millisecond; t < length; t += 500 * time.Millisecond {
		ev = append(ev, lab.Event{At: t, Name: "poll status", Do: func() error {
			var st agent.Status
			if err := a.Status(&st); err != nil {
				return err
			}
			s := StatusSample{Phase: phase, T: t.Seconds(), WriteDelayMs: map[string]float64{}, ReadDelayMs: map[string]float64{}}
			if len(st.Resources) > 0 {
				s.Classes = st.Resources[0].Classes
				s.IndicatorMs = agent.JSONFloat(st.Resources[0].IndicatorMs)
			}
			for k, v := range st.Throttles {
				if v.WriteDelay > 0 {
					s.WriteDelayMs[k] = ms(v.WriteDelay)
				}
				if v.ReadDelay > 0 {
					s.ReadDelayMs[k] = ms(v.ReadDelay)
				}
			}
			*out = append(*out, s)
			return nil
		}})
	}
	return ev
}

// runPolled runs phase p while polling agent a's status (nil: no agent,
// no polls), stops a, and appends the polls to the run's status log.
func (r *runner) runPolled(p *lab.Phase, a *lab.LabAgent, length time.Duration) (*lab.PhaseResult, []StatusSample, error) {
	var polls []StatusSample
	if a != nil {
		p.Events = append(p.Events, statusPoller(a, p.Name, length, &polls)...)
	}
	res, err := r.Run(p, 0)
	if a != nil {
		err = cmp.Or(err, a.Stop())
	}
	if err != nil {
		return nil, nil, err
	}
	if err := writeStatusLog(r.Dir, polls); err != nil {
		return nil, nil, err
	}
	return res, polls, nil
}

// class is class name's status in the poll (nil: none).
func (s *StatusSample) class(name string) *agent.ClassStatus {
	for k := range s.Classes {
		if s.Classes[k].Name == name {
			return &s.Classes[k]
		}
	}
	return nil
}

// pollSeries is f of class name's status in every poll that has it.
func pollSeries(label string, polls []StatusSample, name string, f func(*agent.ClassStatus) float64) report.Series {
	s := report.Series{Name: label}
	for _, p := range polls {
		if cs := p.class(name); cs != nil {
			s.X, s.Y = append(s.X, p.T), append(s.Y, f(cs))
		}
	}
	return s
}

// inWindow are the polls within res's window, (From, To].
func inWindow(polls []StatusSample, res *lab.PhaseResult) []StatusSample {
	return slices.DeleteFunc(slices.Clone(polls), func(p StatusSample) bool {
		return p.T <= res.Phase.From.Seconds() || p.T > res.Phase.To.Seconds()
	})
}

// startConfigured writes config text to file in the run directory and
// starts a delay-line agent called name on it.
func (r *runner) startConfigured(file, config, name string) (*lab.LabAgent, error) {
	cfg := filepath.Join(r.Dir, file)
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return nil, err
	}
	return lab.StartAgentNamed(name, "delayline", r.Dir, "--config", cfg)
}

// writeStatusLog appends samples to dir/status.jsonl.
func writeStatusLog(dir string, samples []StatusSample) error {
	f, err := os.OpenFile(filepath.Join(dir, "status.jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, s := range samples {
		if err := enc.Encode(s); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
