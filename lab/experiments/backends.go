package experiments

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/throttle"
)

// DelayBackends are the throttle backends `lab run --backends` may name:
// the ones that delay packets (htb caps rates, dry-run does nothing), as
// the throttle registry lists them.
var DelayBackends = throttle.DelayNames()

// checkBackends rejects a --backends list the experiment cannot run: an
// unknown or repeated name. Whether this kernel has the backend is the
// agent's to say when it starts (`sanqos throttle backends`).
func checkBackends(bs []string) error {
	for i, b := range bs {
		if !slices.Contains(DelayBackends, b) {
			return fmt.Errorf("--backends: %q is not a delay backend (have: %s)", b, strings.Join(DelayBackends, ", "))
		}
		if slices.Contains(bs[:i], b) {
			return fmt.Errorf("--backends: %q named twice", b)
		}
	}
	return nil
}

// startAgent is StartAgent for the experiments that report their agent's
// CPU: its use is added to r.use when it stops.
func (r *runner) startAgent(backend string, extra ...string) (*lab.LabAgent, error) {
	a, err := lab.StartAgent(backend, r.Dir, extra...)
	if err == nil {
		a.CountUse(&r.use)
	}
	return a, err
}

// backendRun is the part of an experiment's summary that eachBackend
// fills in and reads back.
type backendRun interface {
	tcpTotal() lab.TCPCounters
	setAgent(backend string, cpuPct float64)
}

// backendFields are the fields eachBackend fills in an experiment's
// summary (embedded, so they sit at its top level in summary.json).
type backendFields struct {
	Backend string `json:"backend"`
	// AgentCPUPct is the agents' CPU while they ran, % of one core.
	AgentCPUPct float64 `json:"agent_cpu_pct"`
}

func (b *backendFields) setAgent(backend string, cpuPct float64) {
	b.Backend, b.AgentCPUPct = backend, cpuPct
}

// BackendRun is one backend's run in a BackendsSummary.
type BackendRun struct {
	Backend string `json:"backend"`
	// Dir is the run's own results directory (its phases, plots and
	// summary.json), relative to the summary's.
	Dir string `json:"dir"`
	// AgentCPUPct is the agent's whole CPU time (the backend's userspace
	// work included) over the time it ran, in % of one core.
	AgentCPUPct float64 `json:"agent_cpu_pct"`
	runTCP
	Seconds float64 `json:"seconds"`
	Summary any     `json:"summary"`
}

// BackendsSummary is summary.json of delay-sweep, throttle-effect or
// overhead run with --backends: the experiment once per backend, one
// after the other on the same lab, side by side.
type BackendsSummary struct {
	Experiment string       `json:"experiment"`
	Backends   []string     `json:"backends"`
	Runs       []BackendRun `json:"runs"`
}

// eachBackend runs an experiment whose agent uses one throttle backend:
// the delay line, or each backend --backends names, in its own
// subdirectory (trace rows tagged backend/phase) with its own summary.json,
// the whole returned as a BackendsSummary.
func (r *runner) eachBackend(name string, run func(backend string) (backendRun, error)) (any, error) {
	one := func(be string) (backendRun, float64, error) {
		r.use = lab.AgentUse{}
		t0 := time.Now()
		s, err := run(be)
		if s != nil {
			s.setAgent(be, r.use.Pct())
		}
		return s, time.Since(t0).Seconds(), err
	}
	if len(r.opts.Backends) == 0 {
		s, _, err := one("delayline")
		return s, err
	}
	base := r.Dir
	defer func() { r.Dir, r.TracePrefix = base, "" }()
	sum := BackendsSummary{Experiment: name, Backends: r.opts.Backends}
	for _, be := range r.opts.Backends {
		r.Dir, r.TracePrefix = filepath.Join(base, be), be+"/"
		if err := os.MkdirAll(r.Dir, 0o755); err != nil {
			return sum, err
		}
		s, secs, err := one(be)
		if s == nil {
			return sum, fmt.Errorf("%s: %w", be, err)
		}
		err = cmp.Or(err, r.WriteSummary(s))
		if err == nil {
			_, err = report.Generate(r.Dir)
		}
		tcp := s.tcpTotal()
		sum.Runs = append(sum.Runs, BackendRun{Backend: be, Dir: be, AgentCPUPct: r.use.Pct(), runTCP: runTCP{tcp.RetransSegs, tcp},
			Seconds: report.Round(secs, 1), Summary: s})
		if err != nil {
			return sum, fmt.Errorf("%s: %w", be, err)
		}
	}
	return sum, nil
}
