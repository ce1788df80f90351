package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// Interval is the sampling and control tick, as in the lab and the agent.
const Interval = 100 * time.Millisecond

// The lab's hosts: b2 is the reader (important), b3..b5 the writers; host
// bN is 10.99.0.N and its LUN is loop(N−2), as `sanqos-lab lab up` builds them.
var (
	Hosts   = []string{"b2", "b3", "b4", "b5"}
	Devices = []string{"loop0", "loop1", "loop2", "loop3"}
)

// HostAddr is a lab host's address.
func HostAddr(h string) netip.Addr {
	n, _ := strconv.Atoi(h[1:])
	return netip.AddrFrom4([4]byte{10, 99, 0, byte(n)})
}

// Phase is one simulated run: a workload, optionally under an agent.
type Phase struct {
	Name, Label string
	Length      time.Duration
	From, To    time.Duration // the measurement window
	Jobs        []*Job
	Resources   []Resource
	// Agent, if set, runs the real agent with this config against the
	// model, with Topology as discovery's result.
	Agent    *config.Config
	Topology *agent.Topology
	// Fixed applies constant settings (open-loop scenarios).
	Fixed map[netip.Addr]throttle.Setting
	// Hosts names each device in the trace (device → host).
	Hosts map[string]string
}

// Tick is one interval's figures, per host (as the lab's trace).
type Tick struct {
	report.Tick
	Delay float64 // largest write delay applied (ms)
	// ReadDelay is the largest read delay (ms): what slows a backup or
	// the reads of mixed I/O, kept apart so Delay means what it did in
	// the writers' scenarios.
	ReadDelay float64
	// Capped is how many consumers had a write-rate cap (the second
	// lever), CapMBs the tightest cap (MB/s; 0: none).
	Capped int
	CapMBs float64
	// SetpointMs and IndicatorMs are the agent's first resource's
	// setpoint and smoothed wait after the tick (0: no agent), for
	// loop.csv: how the p95 objective's tail factor moves the setpoint.
	SetpointMs, IndicatorMs float64
}

// PhaseResult is a phase's trace.
type PhaseResult struct {
	Phase  *Phase
	Ticks  []Tick
	Events uint64
	// AgentEvents are the agent's events (whom it slowed or released,
	// and why; the last agent.EventHistory of them), nil without one.
	AgentEvents []agent.Event
	// Onset is the first resource's queue and when its controller first
	// acted on each surge (the agent's LastOnset), for the onset's floor.
	Onset report.OnsetQueue
}

// anyDelay is the tick's largest delay in either direction (ms).
func (t Tick) anyDelay() float64 { return math.Max(t.Delay, t.ReadDelay) }

// Window is the ticks of the measurement window.
func (r *PhaseResult) Window() []Tick { return r.Between(r.Phase.From, r.Phase.To) }

// Between returns the ticks whose interval ended in (from, to].
func (r *PhaseResult) Between(from, to time.Duration) []Tick {
	return report.Between(r.Ticks, from, to)
}

// Series returns f of host's interval over the phase.
func (r *PhaseResult) Series(host string, f func(sample.Interval) float64) (x, y []float64) {
	return report.HostSeries(r.Ticks, host, f)
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// NewAgent builds the daemon's agent (agent.New, the real controllers)
// against a model: the model is its diskstats sampler and its throttle,
// and, with wireRates (the daemon in target mode), its TCP rate sampler.
func NewAgent(cfg *config.Config, m *Model, topo *agent.Topology, wireRates bool) *agent.Agent {
	d := agent.Deps{Throttle: m.Throttle(), Sampler: m, Log: discard, NewController: agent.NewPID, NewSmoother: agent.NewEWMA}
	if wireRates {
		d.Rates = m
	}
	a := agent.New(cfg, d)
	a.SetTopology(topo)
	return a
}

// RunPhase simulates a phase: every Interval of virtual time it advances
// the model, runs one agent tick (if any) and records the trace.
func RunPhase(p *Phase, par Params, seed uint64) (*PhaseResult, error) {
	m := NewModel(par, seed, p.Resources, p.Jobs)
	for a, s := range p.Fixed {
		m.Throttle().SetDirect(a, s)
	}
	var ag *agent.Agent
	if p.Agent != nil {
		ag = NewAgent(p.Agent, m, p.Topology, p.Agent.Mode == "target")
	}
	res := &PhaseResult{Phase: p}
	prev, _ := m.Read()
	for t := Interval; t <= p.Length; t += Interval {
		m.RunUntil(t)
		if ag != nil {
			if err := ag.Step(m.Epoch.Add(t)); err != nil {
				return nil, err
			}
		}
		cur, _ := m.Read()
		tk := Tick{Tick: report.Tick{T: t.Seconds(), Dev: map[string]sample.Interval{}}}
		if ag != nil {
			if rs := ag.Resources(); len(rs) > 0 {
				tk.SetpointMs, tk.IndicatorMs = rs[0].SetpointMs, rs[0].IndicatorMs
				if o := rs[0].LastOnset; o != nil && !o.ActedAt.IsZero() {
					res.Onset.Note(o.ActedAt.Sub(m.Epoch).Seconds(), o.BacklogMs)
				}
			}
		}
		for dev, c := range cur {
			h, ok := p.Hosts[dev]
			if !ok {
				continue
			}
			if iv, err := sample.Diff(prev[dev], c); err == nil {
				tk.Dev[h] = iv
			}
		}
		for _, s := range m.Throttle().List() {
			tk.Delay = math.Max(tk.Delay, float64(s.WriteDelay)/1e6)
			tk.ReadDelay = math.Max(tk.ReadDelay, float64(s.ReadDelay)/1e6)
			if s.WriteRate > 0 {
				c := float64(s.WriteRate) / 1e6
				if tk.Capped == 0 || c < tk.CapMBs {
					tk.CapMBs = c
				}
				tk.Capped++
			}
		}
		res.Ticks = append(res.Ticks, tk)
		prev = cur
	}
	if ag != nil {
		res.AgentEvents = ag.Events(0)
		ag.Release()
	}
	res.Events = m.events.seq
	res.Onset.Queue = m.Queue
	simulated.Add(int64(p.Length))
	return res, nil
}

// digestEvents is report's digest of the agent's events (the lab's
// summary.json has the same, lab/experiments agent_events.go).
func digestEvents(evs []agent.Event) *report.ThrottleEvents {
	recs := make([]report.EventRecord, len(evs))
	for i, e := range evs {
		recs[i] = report.EventRecord{Consumer: e.Consumer, Kind: string(e.Kind), Direction: e.Direction, Reason: e.Reason}
	}
	return report.DigestEvents(recs)
}

// WriteLoop writes loop.csv: per agent tick, the setpoint and the
// indicator (the lab's loop-*.csv columns that matter for the p95
// objective). Phases without an agent are left out.
func WriteLoop(w io.Writer, rs []*PhaseResult) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"phase", "t_s", "setpoint_ms", "indicator_ms", "raw_ms", "delay_ms"})
	for _, r := range rs {
		if r.Phase.Agent == nil {
			continue
		}
		for _, t := range r.Ticks {
			raw := ""
			if iv, ok := t.Dev[r.Phase.Hosts[Devices[0]]]; ok && !math.IsNaN(iv.ReadWaitMs) {
				raw = strconv.FormatFloat(iv.ReadWaitMs, 'f', 3, 64)
			}
			_ = cw.Write([]string{r.Phase.Name, strconv.FormatFloat(t.T, 'f', 1, 64), strconv.FormatFloat(t.SetpointMs, 'f', 3, 64),
				strconv.FormatFloat(t.IndicatorMs, 'f', 3, 64), raw, strconv.FormatFloat(t.anyDelay(), 'f', 2, 64)})
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteTrace writes results as the lab's trace.csv (same columns).
func WriteTrace(w io.Writer, rs []*PhaseResult) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"phase", "repeat", "t_s", "host", "device", "reads", "writes", "r_await_ms", "w_await_ms", "read_mb_s", "write_mb_s", "inflight"})
	f := func(v float64, prec int) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', prec, 64)
	}
	for _, r := range rs {
		devOf := map[string]string{}
		for d, h := range r.Phase.Hosts {
			devOf[h] = d
		}
		hosts := slices.Sorted(maps.Keys(devOf))
		for _, t := range r.Ticks {
			for _, h := range hosts {
				iv, ok := t.Dev[h]
				if !ok {
					continue
				}
				_ = cw.Write([]string{r.Phase.Name, "0", f(t.T, 3), h, devOf[h], fmt.Sprint(iv.Reads), fmt.Sprint(iv.Writes),
					f(iv.ReadWaitMs, 3), f(iv.WriteWaitMs, 3), f(iv.ReadBps/1e6, 3), f(iv.WriteBps/1e6, 3), fmt.Sprint(iv.InFlight)})
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// simulated is the virtual time all phases of this process have covered.
var simulated atomic.Int64

// Simulated is the total virtual time simulated so far by this process
// (for speed-up figures; kept out of summaries so they stay reproducible).
func Simulated() time.Duration { return time.Duration(simulated.Load()) }

// Info is sim.json: how fast a run went (wall-clock, so not in summary.json).
type Info struct {
	Scenario   string  `json:"scenario"`
	Seed       uint64  `json:"seed"`
	Scale      float64 `json:"scale"`
	Params     Params  `json:"params"`
	SimulatedS float64 `json:"simulated_s"`
	WallS      float64 `json:"wall_s"`
	SpeedUp    float64 `json:"speed_up"`
}

// RunInfo describes a finished run.
func RunInfo(name string, o Options, simulated, wall time.Duration) Info {
	i := Info{Scenario: name, Seed: o.Seed, Scale: o.Scale, Params: o.Params, SimulatedS: simulated.Seconds(), WallS: wall.Seconds()}
	if wall > 0 {
		i.SpeedUp = math.Round(simulated.Seconds() / wall.Seconds())
	}
	return i
}
