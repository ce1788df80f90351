package experiments

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// reliability: Faults injected while throttling, and a soak.
func init() {
	register(&Experiment{Name: "reliability", DefaultScale: 1, Flags: []*Flag{flagAgentSet, flagLUNMap},
		Title: "Faults injected while throttling (kill -9, crash recovery, tgtd restart, new initiator address, LUN and device removal, clock jumps, the delay line at its limits) and a 30-minute soak (× scale)", Run: runReliability})
}

// Fault is one row of RELIABILITY.md: what was done, what had to hold,
// what was measured.
type Fault struct {
	Name   string `json:"fault"`
	Expect string `json:"expect"`
	Result string `json:"result"`
	Pass   bool   `json:"pass"`
	// Data says whether written data was read back and checked (fio
	// crc32c verify), and the outcome.
	Data string          `json:"data_verified"`
	TCP  lab.TCPCounters `json:"tcp"`
	// LogLines is the agent's warnings and errors during the fault: one
	// event should give a line or two, never a flood.
	LogLines int `json:"agent_log_lines"`
}

// ReliabilitySummary is summary.json of the reliability experiment.
type ReliabilitySummary struct {
	Faults []Fault `json:"faults"`
	Pass   bool    `json:"pass"`
}

// ErrFaultsFailed is returned (with the summary) when a fault's
// expectation did not hold.
var ErrFaultsFailed = errors.New("reliability: some faults failed (see RELIABILITY.md in the run directory)")

const (
	labAgentLabel = "sanqos-lab-agent"
	killAt        = 3 * time.Second
)

func runReliability(r *runner) (any, error) {
	faults := []func(*runner) Fault{
		faultKill9, faultKill9Marks, faultStaleObjects, faultTgtdRestart, faultNewAddress, faultLUNRemoved,
		faultDeviceGone, faultClockJump, faultCounterWrap, faultMaxDelay, faultQueueLimit, faultSoak,
	}
	sum := ReliabilitySummary{Pass: true}
	only := os.Getenv("SANQOS_FAULTS") // comma-separated indexes, for debugging one fault
	for i, f := range faults {
		if only != "" && !strings.Contains(","+only+",", ","+strconv.Itoa(i)+",") {
			continue
		}
		if err := r.Context().Err(); err != nil {
			return sum, err // a fault's own failure is its row; a cancel ends the run
		}
		res := f(r)
		// Each fault's agents write agent.log; keep each fault's.
		os.Rename(filepath.Join(r.Dir, "agent.log"), filepath.Join(r.Dir, fmt.Sprintf("agent-fault%d.log", i)))
		sum.Faults = append(sum.Faults, res)
		sum.Pass = sum.Pass && res.Pass
		// Whatever a fault did, the next one starts from a clean target.
		cleanupLabAgent()
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "RELIABILITY.md"), []byte(reliabilityTable(sum, r.opts)), 0o644); err != nil {
		return sum, err
	}
	if !sum.Pass {
		return sum, ErrFaultsFailed
	}
	return sum, nil
}

// cleanupLabAgent removes what any backend of the lab agent left in the
// target namespace, as `sanqos cleanup` would there.
func cleanupLabAgent() {
	if bin, err := lab.SanqosExecutable(); err == nil {
		lab.InNS(lab.TargetNS, bin, "cleanup", "--label", labAgentLabel)
	}
}

// reliabilityTable renders the summary as the Markdown table of
// RELIABILITY.md.
func reliabilityTable(s ReliabilitySummary, o Options) string {
	var b strings.Builder
	b.WriteString("| fault | must hold | measured | data verified | retrans (RTO / TLP) | agent warnings | result |\n|---|---|---|---|---|---|---|\n")
	for _, f := range s.Faults {
		res := "**fail**"
		if f.Pass {
			res = "pass"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d (%d / %d) | %d | %s |\n", f.Name, f.Expect, f.Result, f.Data,
			f.TCP.RetransSegs, f.TCP.Timeouts, f.TCP.LossProbes, f.LogLines, res)
	}
	return b.String()
}

// verifiedWriter writes size bytes per thread with crc32c headers and
// reads them all back at the end; fio exits non-zero on any I/O error or
// mismatch (verify_fatal). It has no runtime: fio skips the verify phase
// of time-based jobs.
func (r *runner) verifiedWriter(host string, threads int, size int64) lab.Job {
	return lab.Job{Name: "verified", Host: host, URL: r.LUN(host).URL, RW: "write", BS: 64 << 10, NumJobs: threads, Size: size, Verify: true}
}

// run runs p and adds its TCP counters to the fault's.
func (f *Fault) run(r *runner, p *lab.Phase) (*lab.PhaseResult, error) {
	res, err := r.Run(p, 0)
	if res != nil {
		f.TCP = f.TCP.Add(res.TCP)
	}
	return res, err
}

func failed(f Fault, err error) Fault {
	f.Result = "error: " + err.Error()
	return f
}

// controlledLoad is the pid/autonomic load: the reader on b2 and writers on
// the other hosts (writerHosts), plus an optional verified writer.
func (r *runner) controlledLoad(name, label string, length time.Duration, writerHosts []string, perHost int) *lab.Phase {
	p := &lab.Phase{Name: name, Label: label, Length: length, From: time.Second, To: length}
	p.Jobs = []lab.Job{r.reader(length)}
	for _, h := range writerHosts {
		p.Jobs = append(p.Jobs, r.writer(h, perHost, length))
	}
	return p
}

// startAutonomic starts the agent with discovery from tgt and a 15 ms
// threshold, as the autonomic experiment does.
func (r *runner) startAutonomic(tag string) (*lab.LabAgent, error) {
	cfg := filepath.Join(r.Dir, "agent-"+tag+".yaml")
	if err := r.agentConfig(cfg, 15*time.Millisecond, true); err != nil {
		return nil, err
	}
	return lab.StartAgent("delayline", r.Dir, "--config", cfg)
}

// throttleLog is which consumers the agent throttled, by sample time.
type throttleLog map[time.Duration][]netip.Addr

// count is the number of samples after the given time in which a
// throttled consumer matched (nil: any consumer).
func (l throttleLog) count(after time.Duration, match func(netip.Addr) bool) int {
	n := 0
	for t, addrs := range l {
		if t > after && slices.ContainsFunc(addrs, func(a netip.Addr) bool { return match == nil || match(a) }) {
			n++
		}
	}
	return n
}

func is(a netip.Addr) func(netip.Addr) bool  { return func(x netip.Addr) bool { return x == a } }
func not(a netip.Addr) func(netip.Addr) bool { return func(x netip.Addr) bool { return x != a } }

// runSampled runs p (its TCP counters the fault's) and records, every
// 500 ms of it, which consumers agent a throttles.
func (f *Fault) runSampled(r *runner, a *lab.LabAgent, p *lab.Phase) (throttleLog, error) {
	seen := throttleLog{}
	for t := 500 * time.Millisecond; t < p.Length; t += 500 * time.Millisecond {
		p.Events = append(p.Events, lab.Event{At: t, Name: "sample throttles", Do: func() error {
			m, err := a.List()
			if err != nil {
				return err
			}
			for k, s := range m {
				if s.WriteDelay > 0 || s.ReadDelay > 0 {
					seen[t] = append(seen[t], k)
				}
			}
			return nil
		}})
	}
	_, err := f.run(r, p)
	return seen, err
}
