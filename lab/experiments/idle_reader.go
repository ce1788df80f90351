package experiments

import (
	"cmp"
	"path/filepath"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// idle-reader: the protected reader alone, agent off then agent on with
// nothing to throttle (issue 55): what the idle agent costs the reader,
// and the reader's own slow reads, at the initiator (its per-I/O log).
func init() {
	register(&Experiment{Name: "idle-reader", DefaultScale: 0.25, Run: func(r *runner) (any, error) { return r.idleReader() },
		Title: "the reader alone, agent off then on with nothing to throttle: its slow reads per I/O and per 100 ms window"})
}

// IdleReaderSummary is summary.json of idle-reader.
type IdleReaderSummary struct {
	Experiment string `json:"experiment"`
	// LimitMs is twice the reader's median read with the agent off: a
	// 100 ms window whose mean read is above it is a slow window, in
	// both phases.
	LimitMs float64         `json:"limit_ms"`
	Off     IdleReaderPhase `json:"agent_off"`
	On      IdleReaderPhase `json:"agent_on"`
	// AgentCPUPct is the agent's CPU while it ran, % of one core.
	AgentCPUPct float64 `json:"agent_cpu_pct"`
	// NoWorse is issue 55's criterion: with the agent on, the share of
	// slow windows is no higher than with it off.
	NoWorse bool `json:"agent_on_no_worse"`
}

// IdleReaderPhase is one phase's reads at the initiator (fio's
// completion latency) beside the target's read wait.
type IdleReaderPhase struct {
	Reads int         `json:"reads"`
	Read  report.Dist `json:"read_ms"` // per I/O
	// ReadsOver30Ms counts single reads over 30 ms (the lab's ~100 ms
	// reads, issue 55).
	ReadsOver30Ms int `json:"reads_over_30ms"`
	// Windows are the 100 ms windows with a completed read; the shares
	// are of those whose mean read is over LimitMs and over 30 ms.
	Windows             int     `json:"windows"`
	WindowsOverLimitPct float64 `json:"windows_over_limit_pct"`
	WindowsOver30MsPct  float64 `json:"windows_over_30ms_pct"`
	// TargetP95Ms is the target's read wait (diskstats), per 100 ms.
	TargetP95Ms float64         `json:"target_p95_ms"`
	TCP         lab.TCPCounters `json:"tcp"`
	Host        report.HostCPU  `json:"host"`
}

// idleReader runs the reader alone twice, as long each (60 s × scale):
// first with no agent, then with the agent on its default config (the
// delay line, threshold 15 ms, discovery on), which, the reader being
// alone, throttles nobody.
func (r *runner) idleReader() (any, error) {
	length := max(r.Scale(60*time.Second), 5*time.Second)
	phase := func(name, label string) *lab.Phase {
		// The first second is the session's login, not the reader.
		return &lab.Phase{Name: name, Label: label, Length: length + 5*time.Second, From: time.Second, To: length, Jobs: []lab.Job{r.reader(length)}}
	}
	off, err := r.Run(phase("agent-off", "agent off"), 0)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(r.Dir, "agent.yaml")
	if err := r.agentConfig(cfg, 15*time.Millisecond, true); err != nil {
		return nil, err
	}
	a, err := r.startAgent("delayline", "--config", cfg)
	if err != nil {
		return nil, err
	}
	on, err := r.Run(phase("agent-on", "agent on, nobody to throttle"), 0)
	err = cmp.Or(err, a.Stop())
	if err != nil {
		return nil, err
	}
	sum := &IdleReaderSummary{Experiment: "idle-reader", AgentCPUPct: r.use.Pct()}
	each, _ := lab.ReaderWindow(off.Reader, off.Phase.From, off.Phase.To)
	sum.LimitMs = report.Round(2*report.Describe(each).P50, 2)
	sum.Off, sum.On = idlePhase(off, sum.LimitMs), idlePhase(on, sum.LimitMs)
	sum.NoWorse = sum.On.WindowsOverLimitPct <= sum.Off.WindowsOverLimitPct
	return sum, nil
}

// idlePhase is a phase's figures from its trace and its reader's reads.
func idlePhase(res *lab.PhaseResult, limitMs float64) IdleReaderPhase {
	each, w := lab.ReaderWindow(res.Reader, res.Phase.From, res.Phase.To)
	p := IdleReaderPhase{Reads: len(each), Read: report.RoundDist(report.Describe(each)), TCP: res.TCP, Host: res.Host,
		TargetP95Ms: report.Round(report.Describe(report.Values(res.Window(), "b2", readWait)).P95, 2), Windows: len(w)}
	p.ReadsOver30Ms = countOver(each, 30)
	if len(w) > 0 {
		p.WindowsOverLimitPct = report.Round(100*float64(countOver(w, limitMs))/float64(len(w)), 2)
		p.WindowsOver30MsPct = report.Round(100*float64(countOver(w, 30))/float64(len(w)), 2)
	}
	return p
}

// countOver counts the values over limit.
func countOver(xs []float64, limit float64) int {
	n := 0
	for _, x := range xs {
		if x > limit {
			n++
		}
	}
	return n
}
