package sim

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/report"
)

// ScaleOptions size the scale scenario.
type ScaleOptions struct {
	Resources   int
	PerResource int // consumers per resource
	Length      time.Duration
	Seed        uint64
	Threshold   time.Duration
}

// DefaultScale is the target: one agent, 1,000 resources, 10,000
// consumers, 100 ms ticks.
func DefaultScale() ScaleOptions {
	return ScaleOptions{Resources: 1000, PerResource: 10, Length: 6 * time.Second, Seed: 1, Threshold: 15 * time.Millisecond}
}

// ScaleSummary is the scale scenario's summary.json.
type ScaleSummary struct {
	Experiment string `json:"experiment"`
	Resources  int    `json:"resources"`
	Consumers  int    `json:"consumers"`
	Ticks      int    `json:"ticks"`
	IntervalMs int    `json:"interval_ms"`
	// Tick cost of the real agent (Agent.Step: sample, 1,000 resource
	// pipelines, merge, apply): wall time per tick (one goroutine, so
	// this is its CPU) and the process's CPU per tick (getrusage,
	// including the garbage collector's other threads).
	TickWallMs report.Dist `json:"tick_wall_ms"`
	TickCPUMs  float64     `json:"tick_cpu_ms_mean"`
	// AgentHeapMB is the heap the agent holds (live, after GC) once
	// running; TotalAllocPerTickMB is its garbage per tick.
	AgentHeapMB         float64 `json:"agent_heap_mb"`
	AllocPerTickMB      float64 `json:"alloc_per_tick_mb"`
	ThrottleSetCalls    int     `json:"throttle_set_calls"`
	ThrottleChanges     int     `json:"throttle_consumer_changes"`
	SaturatedResources  int     `json:"resources_throttled"`
	LateWriters         int     `json:"late_writers"`
	LateWritersDetected int     `json:"late_writers_detected"`
	// KnownToThrottleable is, per late writer whose session already
	// existed (half of them), the virtual time from its first write to the
	// first tick whose status lists it in the throttleable set (write-rate
	// EWMA above throttleable_write_mb_s). TimeToThrottleable is the same
	// for writers on new sessions: it includes waiting for the next
	// discovery round (1 s), which FromDiscovery leaves out.
	KnownToThrottleableMs report.Dist `json:"known_session_to_throttleable_ms"`
	TimeToThrottleableMs  report.Dist `json:"new_session_to_throttleable_ms"`
	FromDiscoveryMs       report.Dist `json:"time_from_discovery_to_throttleable_ms"`
	SimulatedS            float64     `json:"simulated_s"`
	Events                uint64      `json:"events"`
}

// scaleAddr is consumer i's address (10.0.0.0/8, from .1).
func scaleAddr(i int) netip.Addr {
	i++
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
}

// ScaleSetup builds the scale scenario's model, agent config and
// topology: per resource one disk, one LUN per consumer; eight readers
// (8 KiB random, 64 KiB/s), one steady writer (2 MB/s) and one late writer
// (64 KiB sequential at 8 MB/s, starting at a random time) that saturates
// its resource, so the controllers and the actuator have work.
func ScaleSetup(so ScaleOptions) (*Model, *config.Config, *agent.Topology, map[netip.Addr]time.Duration, error) {
	rng := rand.New(rand.NewPCG(so.Seed, 7))
	var res []Resource
	var jobs []*Job
	late := map[netip.Addr]time.Duration{}
	topo := &agent.Topology{Resources: map[string]agent.ResourceView{}}
	var b strings.Builder
	fmt.Fprintf(&b, "backend: dry-run\nthreshold: %v\ndiscovery:\n  source: tgt\nresources:\n", so.Threshold)
	for r := 0; r < so.Resources; r++ {
		name := fmt.Sprintf("r%04d", r)
		fmt.Fprintf(&b, "  - name: %s\n", name)
		v := agent.ResourceView{Consumers: map[netip.Addr][]string{}}
		for c := 0; c < so.PerResource; c++ {
			i := r*so.PerResource + c
			a, dev := scaleAddr(i), fmt.Sprintf("lun%05d", i)
			v.Devices = append(v.Devices, dev)
			v.Consumers[a] = []string{dev}
			j := &Job{Name: "reader", Consumer: a, Device: dev, Random: true, BS: 8 << 10, IODepth: 1, RateBps: 64 << 10}
			switch c {
			case so.PerResource - 2:
				j = &Job{Name: "steady", Consumer: a, Device: dev, Write: true, BS: 64 << 10, IODepth: 1, RateBps: 2e6}
			case so.PerResource - 1:
				start := time.Duration(rng.Int64N(int64(so.Length/2))) + so.Length/6
				j = &Job{Name: "late", Consumer: a, Device: dev, Write: true, BS: 64 << 10, IODepth: 2, RateBps: 8e6, Start: start}
				late[a] = start
			}
			jobs = append(jobs, j)
		}
		res = append(res, Resource{Name: name, Devices: v.Devices})
		topo.Resources[name] = v
	}
	cfg, err := config.Parse([]byte(b.String()))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	p := DefaultParams()
	return NewModel(p, so.Seed, res, jobs), cfg, topo, late, nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RunScale runs the scale scenario. Its wall-clock figures vary by
// machine; the simulated ones (detection times, throttled resources) are
// deterministic for a seed.
func RunScale(so ScaleOptions) (*ScaleSummary, error) {
	m, cfg, topo, late, err := ScaleSetup(so)
	if err != nil {
		return nil, err
	}
	runtime.GC()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	resOf, known := lateWriters(topo, late)
	r := &scaleRun{so: so, m: m, cfg: cfg, topo: topo, late: late, known: known}
	// Consumers have their own LUNs here, so device rates name the
	// writers; the TCP rate sampler is not used.
	r.a = NewAgent(cfg, m, r.discover(0), false)
	r.discovered = map[netip.Addr]time.Duration{}
	r.s = &ScaleSummary{Experiment: "scale", Resources: so.Resources, Consumers: so.Resources * so.PerResource,
		IntervalMs: int(Interval / time.Millisecond), LateWriters: len(late)}
	r.pending = map[string][]netip.Addr{}
	for c, res := range resOf {
		r.pending[res] = append(r.pending[res], c)
	}
	r.throttled = map[string]bool{}
	for t := Interval; t <= so.Length; t += Interval {
		if err := r.tick(t); err != nil {
			return nil, err
		}
	}
	return r.summary(ms0), nil
}

// lateWriters returns the resource of each late writer and whether it is
// known to the agent before it starts writing.
func lateWriters(topo *agent.Topology, late map[netip.Addr]time.Duration) (map[netip.Addr]string, map[netip.Addr]bool) {
	resOf := map[netip.Addr]string{}
	for name, v := range topo.Resources {
		for c := range v.Consumers {
			if _, ok := late[c]; ok {
				resOf[c] = name
			}
		}
	}
	// Late writers on even resources had logged in before (idle
	// sessions): they need no discovery, only the rate EWMA.
	known := map[netip.Addr]bool{}
	for c, r := range resOf {
		var n int
		fmt.Sscanf(r, "r%d", &n)
		known[c] = n%2 == 0
	}
	return resOf, known
}

// scaleRun is one run of the scale scenario: the agent, the late writers
// it has yet to see become throttleable, and what its ticks measured.
type scaleRun struct {
	so    ScaleOptions
	m     *Model
	cfg   *config.Config
	topo  *agent.Topology
	late  map[netip.Addr]time.Duration
	known map[netip.Addr]bool
	a     *agent.Agent
	s     *ScaleSummary

	discovered map[netip.Addr]time.Duration // late writer → discovery round that found it
	pending    map[string][]netip.Addr      // resource → late writers not yet throttleable
	throttled  map[string]bool              // resources ever delayed

	walls, detect, afterDisc, detectKnown []float64
	cpu                                   time.Duration
	alloc                                 uint64
}

// discover is the topology at time t. Discovery: a late writer's session
// appears in the topology at the first discovery round (every discovery
// interval, 1 s by default) after it logs in, i.e. starts; every round
// publishes a new topology, as the daemon's discovery loop does.
func (r *scaleRun) discover(t time.Duration) *agent.Topology {
	nt := &agent.Topology{Resources: make(map[string]agent.ResourceView, len(r.topo.Resources))}
	for name, v := range r.topo.Resources {
		nv := agent.ResourceView{Devices: v.Devices, Consumers: make(map[netip.Addr][]string, len(v.Consumers))}
		for c, d := range v.Consumers {
			if st, ok := r.late[c]; !ok || st <= t || r.known[c] {
				nv.Consumers[c] = d
			}
		}
		nt.Resources[name] = nv
	}
	return nt
}

// tick runs the model to t, publishes a topology on discovery rounds,
// steps the agent (timing it, and measuring its allocation at half time)
// and records the late writers it now finds throttleable.
func (r *scaleRun) tick(t time.Duration) error {
	r.m.RunUntil(t)
	if t%r.cfg.Discovery.Interval == 0 {
		r.a.SetTopology(r.discover(t))
		for c, st := range r.late {
			if _, ok := r.discovered[c]; !ok && st <= t {
				r.discovered[c] = t
			}
		}
	}
	var before runtime.MemStats
	if t == r.so.Length/2 {
		runtime.ReadMemStats(&before)
	}
	c0, w0 := cpuTime(), time.Now()
	if err := r.a.Step(r.m.Epoch.Add(t)); err != nil {
		return err
	}
	r.walls = append(r.walls, float64(time.Since(w0))/1e6)
	r.cpu += cpuTime() - c0
	if t == r.so.Length/2 {
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		r.alloc = after.TotalAlloc - before.TotalAlloc
	}
	r.s.Ticks++
	r.detectLate(t)
	return nil
}

// detectLate records, at t, which late writers are now throttleable, and
// which resources are delayed.
func (r *scaleRun) detectLate(t time.Duration) {
	for _, st := range r.a.Resources() {
		if st.Delay > 0 {
			r.throttled[st.Name] = true
		}
		cs := r.pending[st.Name]
		if len(cs) == 0 {
			continue
		}
		in := map[string]bool{}
		for _, x := range st.Throttleable {
			in[x] = true
		}
		var keep []netip.Addr
		for _, c := range cs {
			if in[c.String()] {
				if r.known[c] {
					r.detectKnown = append(r.detectKnown, float64(t-r.late[c])/1e6)
				} else {
					r.detect = append(r.detect, float64(t-r.late[c])/1e6)
					r.afterDisc = append(r.afterDisc, float64(t-r.discovered[c])/1e6)
				}
			} else {
				keep = append(keep, c)
			}
		}
		r.pending[st.Name] = keep
	}
}

// summary fills in the run's summary: the agent's heap growth since ms0,
// its tick costs, and the late writers' detection times.
func (r *scaleRun) summary(ms0 runtime.MemStats) *ScaleSummary {
	s := r.s
	var ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	s.AgentHeapMB = report.Round(float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc))/1e6, 1)
	s.AllocPerTickMB = report.Round(float64(r.alloc)/1e6, 2)
	runtime.KeepAlive(r.a)
	s.TickWallMs = report.RoundDist(report.Describe(r.walls))
	s.TickCPUMs = report.Round(float64(r.cpu)/1e6/float64(s.Ticks), 2)
	s.ThrottleSetCalls, s.ThrottleChanges = r.m.Throttle().Sets, r.m.Throttle().Changed
	s.SaturatedResources = len(r.throttled)
	sort.Float64s(r.detect)
	s.LateWritersDetected = len(r.detect) + len(r.detectKnown)
	s.KnownToThrottleableMs = report.RoundDist(report.Describe(r.detectKnown))
	s.TimeToThrottleableMs = report.RoundDist(report.Describe(r.detect))
	s.FromDiscoveryMs = report.RoundDist(report.Describe(r.afterDisc))
	s.SimulatedS = r.so.Length.Seconds()
	s.Events = r.m.events.seq
	r.a.Release()
	return s
}
