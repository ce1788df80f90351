package experiments

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// sloClasses: Seed 004's SLO classes vs a bulk writer, then a burst.
func init() {
	register(&Experiment{Name: "slo-classes", DefaultScale: 1,
		Title: "Seed 004's power/knowledge/task readers vs a bulk writer: agent off vs the slo-classes policy, then a burst", Run: runSLOClassesLab})
}

// The policies' lab experiments (issue 6): slo-classes and weighted with
// the real tgt, fio and agent, each against a baseline in the same
// invocation. The agent's own per-class accounting (its status) and an
// independent computation from the target's diskstats and fio's output
// are both in the summary, so one checks the other.

// LabSLOClass is one of seed 004's classes mapped onto a lab initiator.
type LabSLOClass = report.SLOClass

// SLOLabClasses are seed 004's Table 1, 64 KB column (throughput = IOPS ×
// 64 KB, KB = 1000 bytes as the seed's figures have it), one class per
// initiator. The IOPS and MB/s objectives are the seed's: together 45
// random 64 KB reads a second, a third of what the modelled disk serves
// (a random 64 KB read costs it 5 ms seek + 0.2 ms + 1.6 ms transfer =
// 6.8 ms). The seed's latency objectives (1.3/2.4/6.4 ms) are below one
// such read for power and knowledge, so those are scaled to what the disk
// can deliver with the other classes reading beside them (power 10 ms,
// knowledge 15 ms, in the seed's order); task keeps the seed's 6.4 ms,
// which no read on this disk can meet: the experiment must also show the
// deviation reported where capacity does not allow.
var SLOLabClasses = []LabSLOClass{
	{Name: "power", Host: "b2", Priority: 3, IOPS: 25, MBs: 1.6, Latency: 10 * time.Millisecond, Burst: 10 * time.Second},
	{Name: "knowledge", Host: "b3", Priority: 2, IOPS: 15, MBs: 0.96, Latency: 15 * time.Millisecond, Burst: 10 * time.Second},
	{Name: "task", Host: "b4", Priority: 1, IOPS: 5, MBs: 0.32, Latency: 6400 * time.Microsecond, Burst: 30 * time.Second},
}

// sloBulkHost is the bulk writer's initiator (in no class: best effort).
const sloBulkHost = "b5"

// sloBulkThreads is the bulk writer's threads (one 64 KiB write in flight
// each): enough to push every class's wait past its objective with the
// agent off, few enough that a 20 ms delay per write can make room.
const sloBulkThreads = 4

// sloMaxDelay is the slo-classes runs' max_delay.
const sloMaxDelay = 50 * time.Millisecond

// sloBS is the classes' block size: seed 004's 64 KB (1000-byte KB).
const sloBS = 64000

// sloAgentConfig is the agent's config for the slo-classes runs: the
// resource discovered from tgt, its policy and classes.
func (r *runner) sloAgentConfig(path, backend, http string, burstScale float64) error {
	var b strings.Builder
	// max_delay 50ms: best effort should give way as far as the classes
	// need; at the default 20 ms the bulk writer still held the disk a
	// fifth of the time and power's 10 ms was just missed.
	fmt.Fprintf(&b, "backend: %s\nhttp: %s\nthreshold: 15ms\nmax_delay: %v\ndiscovery:\n  source: tgt\n  tgt_control_port: %d\nresources:\n  - name: %s\n    policy: slo-classes\n",
		backend, http, sloMaxDelay, lab.TgtdPort, r.Res.Name)
	// Each initiator has its own LUN on the one target, but tgt lets every
	// initiator reach every LUN: without consumer_devices every class
	// would be measured on all four.
	b.WriteString(r.consumerDevicesYAML())
	b.WriteString("    classes:\n")
	for _, c := range SLOLabClasses {
		b.WriteString(c.YAML(lab.HostAddr(c.Host), burstScale))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// SLORun is one run (agent off or policy on) of slo-classes.
type SLORun struct {
	Name    string         `json:"name"`
	Policy  string         `json:"policy"` // "none": agent off (a dry-run agent only watched)
	Classes []ClassFigures `json:"classes"`
	// BulkMBs is the bulk writer's (best effort) write rate.
	BulkMBs float64         `json:"bulk_write_mb_s"`
	TCP     lab.TCPCounters `json:"tcp"`
}

// SLOClassesSummary is summary.json of slo-classes.
type SLOClassesSummary struct {
	Experiment  string       `json:"experiment"`
	Scale       float64      `json:"scale"`
	ThresholdMs float64      `json:"threshold_ms"`
	MaxDelayMs  float64      `json:"max_delay_ms"`
	Runs        []SLORun     `json:"runs"`
	Burst       BurstFigures `json:"burst"`
	runTCP
}

// sloJobs are the classes reading at their objective rates and the bulk
// writer, all for length.
func (r *runner) sloJobs(length time.Duration, skip string) []lab.Job {
	var jobs []lab.Job
	for _, c := range SLOLabClasses {
		if c.Name == skip {
			continue
		}
		jobs = append(jobs, lab.Job{Name: c.Name, Host: c.Host, URL: r.LUN(c.Host).URL, RW: "randread", BS: sloBS, Rate: int(c.MBs * 1e6), Runtime: length})
	}
	size := r.State.Options.LUNSize / sloBulkThreads / 65536 * 65536
	return append(jobs, lab.Job{Name: "bulk", Host: sloBulkHost, URL: r.LUN(sloBulkHost).URL, RW: "write", BS: 64 << 10, NumJobs: sloBulkThreads, Runtime: length, Size: size})
}

func runSLOClassesLab(r *runner) (any, error) {
	sc := r.Scale
	lead, length := sc(10*time.Second), sc(60*time.Second)
	sum := SLOClassesSummary{Experiment: "slo-classes", Scale: r.opts.Scale, ThresholdMs: 15, MaxDelayMs: ms(sloMaxDelay)}
	var all []*lab.PhaseResult
	var latSeries, iopsSeries []report.Series
	for i, run := range []struct{ name, policy, backend string }{{"agent-off", "none", "dry-run"}, {"slo-classes", "slo-classes", "delayline"}} {
		cfg := filepath.Join(r.Dir, fmt.Sprintf("agent-%s.yaml", run.name))
		// With the agent off, a dry-run agent (it acts on nothing) still
		// keeps the classes' accounting, so both runs have the agent's
		// figures beside the independent ones.
		if err := r.sloAgentConfig(cfg, run.backend, fmt.Sprintf("127.0.0.1:%d", 9311+i), r.opts.Scale); err != nil {
			return nil, err
		}
		// Short agent names: the delay line's classifier label is
		// "sanqos-lab-NAME-dl", at most 20 characters.
		a, err := lab.StartAgentNamed(fmt.Sprintf("slo%d", i), run.backend, r.Dir, "--config", cfg)
		if err != nil {
			return nil, err
		}
		p := &lab.Phase{Name: run.name, Label: run.name, Length: length, From: lead, To: length - sc(time.Second), Jobs: r.sloJobs(length, "")}
		res, polls, err := r.runPolled(p, a, length)
		if err != nil {
			return nil, err
		}
		all = append(all, res)
		sum.Runs = append(sum.Runs, SummarizeSLORun(run.name, run.policy, res, polls, filepath.Join(r.Dir, p.Name+".r0")))
		for _, c := range SLOLabClasses {
			x, y := classSeries(res.Ticks, c.Host, func(ct report.ClassTick) float64 { return ct.Lat })
			latSeries = append(latSeries, report.Series{Name: c.Name + " " + run.name, X: x, Y: report.Smooth(y)})
			x, y = classSeries(res.Ticks, c.Host, func(ct report.ClassTick) float64 { return ct.IOs / ct.Dt })
			iopsSeries = append(iopsSeries, report.Series{Name: c.Name + " " + run.name, X: x, Y: report.Smooth(y)})
		}
	}
	burst, bres, polls, err := r.runSLOBurst()
	if err != nil {
		return nil, err
	}
	all = append(all, bres)
	sum.Burst = burst
	sum.runTCP = tcpOf(all)
	var latRefs, iopsRefs []report.Line
	for _, c := range SLOLabClasses {
		latRefs = append(latRefs, report.Line{Name: c.Name + " objective", Y: ms(c.Latency)})
		iopsRefs = append(iopsRefs, report.Line{Name: c.Name + " objective", Y: c.IOPS})
	}
	if err := report.TimePlot(filepath.Join(r.Dir, "class-latency.png"), "slo-classes: each class's I/O wait (diskstats) vs its objective, agent off and on",
		"time (s)", "wait (ms, EWMA 0.15)", latSeries, latRefs); err != nil {
		return sum, err
	}
	if err := report.TimePlot(filepath.Join(r.Dir, "class-iops.png"), "slo-classes: each class's IOPS vs its objective, agent off and on",
		"time (s)", "IOPS (EWMA 0.15)", iopsSeries, iopsRefs); err != nil {
		return sum, err
	}
	return sum, plotBurst(filepath.Join(r.Dir, "credits.png"), bres, polls, burst)
}
