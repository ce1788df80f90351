package experiments

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// reservations: RAD reservations under network- and disk-bound loads (seed 003).
func init() {
	register(&Experiment{Name: "reservations", DefaultScale: 0.5,
		Title: "RAD reservation (rate + period) under a network-bound and a disk-bound load, agent off vs policy reservations; network vs disk saturation indicators (seed 003)", Run: runReservations})
}

// The reservations experiment's load: b2 is the reserved writer, b3 and b4
// the unreserved writers that fill the link, b5 a light random reader
// whose read wait is the disk indicator.
const (
	resvHost     = "b2"
	resvBytes    = 1_000_000 // per period
	resvPeriod   = time.Second
	resvFioRate  = 1_250_000 // b2's demand: 25 % above its reservation
	resvLinkMbit = 24        // 3 MB/s toward the target: far below the modelled disk
	resvNetThres = 2 * time.Millisecond
)

// ResvRun is one phase × agent mode of the reservations experiment.
type ResvRun struct {
	Load  string `json:"load"`  // net-bound | disk-bound
	Agent string `json:"agent"` // off (dry-run policy) | reservations
	// Per period (1 s, aligned on the phase start, inside the window): the
	// reserved consumer's attained MB (its LUN's writes, diskstats).
	ReservedMB float64 `json:"reserved_mb_per_period"`
	// PeriodsAlignedToAgent: the periods below are the agent's (see
	// resvRun); false: they start at the window's start.
	PeriodsAlignedToAgent bool        `json:"periods_aligned_to_agent"`
	FirstPeriodS          float64     `json:"first_period_at_s"`
	AttainedMB            []float64   `json:"attained_mb_per_period"`
	Attained              report.Dist `json:"attained_mb_dist"`
	Periods               int         `json:"periods"`
	PeriodsMet            int         `json:"periods_met"`
	PctMet                float64     `json:"pct_periods_met"`
	OthersMBs             float64     `json:"others_write_mb_s"`
	ReaderWaitMs          report.Dist `json:"reader_wait_ms"`
	// The agent's indicators, sampled from its status every 200 ms in the
	// window: network queueing delay (srtt − min_rtt of the least-delayed
	// active flow, our delay discounted) and the disk indicator (smoothed
	// read wait). With the agent off (dry-run backend) nothing is really
	// delayed, so NetQueueMs is the undiscounted reading there;
	// NetRawQueueMs is always the undiscounted one.
	NetQueueMs    report.Dist `json:"net_queue_ms"`
	NetRawQueueMs report.Dist `json:"net_raw_queue_ms"`
	DiskIndicator report.Dist `json:"disk_indicator_ms"`
	// PctCongested / PctDiskSaturated: share of status samples in which
	// the agent called the network congested / the disk saturated.
	PctCongested     float64 `json:"pct_samples_net_congested"`
	PctDiskSaturated float64 `json:"pct_samples_disk_saturated"`
	// LaxityPct is the reservation's %laxity as the agent computed it.
	LaxityPct report.Dist `json:"laxity_pct"`
	PctAtRisk float64     `json:"pct_samples_at_risk"`
	// AgentPeriodsMet is the agent's own count (its periods start at its
	// first tick, not at the phase's).
	AgentPeriods    int `json:"agent_periods"`
	AgentPeriodsMet int `json:"agent_periods_met"`
	// MaxDelayMs is the largest delay applied to anyone; ThrottledHosts who
	// was ever throttled.
	MaxDelayMs     float64            `json:"max_delay_ms"`
	ThrottledHosts []string           `json:"throttled_hosts"`
	TCP            report.TCPCounters `json:"tcp"`
}

// ResvSummary is summary.json of reservations.
type ResvSummary struct {
	Experiment string  `json:"experiment"`
	Scale      float64 `json:"scale"`
	// LinkMbit is the TBF rate put on the bridge port toward the target in
	// the net-bound phases.
	LinkMbit   int       `json:"link_mbit"`
	Consumer   string    `json:"reserved_consumer"`
	ReservedMB float64   `json:"reserved_mb"`
	PeriodS    float64   `json:"period_s"`
	Runs       []ResvRun `json:"runs"`
	runTCP
}

// linkPort is the bridge port toward the target: its egress carries every
// initiator's writes to the target.
func linkPort() string { return "p-" + lab.TargetNS }

// removeLinkLimit deletes a TBF root qdisc on the target's bridge port, if
// there is one (ours, maybe left by a killed run); anything else there is
// not ours and stays.
func removeLinkLimit() error {
	out, err := lab.InNS(lab.SwitchNS, "tc", "qdisc", "show", "dev", linkPort(), "root")
	if err != nil || !strings.Contains(out, "qdisc tbf") {
		return err
	}
	_, err = lab.InNS(lab.SwitchNS, "tc", "qdisc", "del", "dev", linkPort(), "root")
	return err
}

// limitLink makes the network the bottleneck: a token bucket of mbit on
// the bridge port toward the target, with a queue deep enough (4 MB) that
// it delays rather than drops (the lab's target window is 48 KiB per
// connection, so a handful of writers never fill it). The returned undo
// removes it; a SIGINT/SIGTERM during the run removes it too.
func limitLink(mbit int) (undo func() error, err error) {
	if err := removeLinkLimit(); err != nil {
		return nil, err
	}
	if _, err := lab.InNS(lab.SwitchNS, "tc", "qdisc", "add", "dev", linkPort(), "root", "tbf",
		"rate", fmt.Sprintf("%dmbit", mbit), "burst", "64kb", "limit", "4mb"); err != nil {
		return nil, err
	}
	sig := make(chan os.Signal, 1)
	done := make(chan struct{})
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case s := <-sig:
			removeLinkLimit()
			signal.Stop(sig)
			if p, err := os.FindProcess(os.Getpid()); err == nil {
				p.Signal(s) // default action now: the run ends as it would have
			}
		case <-done:
		}
	}()
	return func() error {
		signal.Stop(sig)
		close(done)
		return removeLinkLimit()
	}, nil
}

func (r *runner) resvAgentConfig(path, backend, http string) error {
	y := fmt.Sprintf(`backend: %s
http: %q
threshold: 15ms
# Up to 60 ms: 20 ms of ACK delay left six 64 KiB writers still able to
# fill a 3 MB/s link (lab, scale 0.25); 60 ms stays far below TCP's 200 ms
# minimum RTO.
max_delay: 60ms
discovery:
  source: tgt
  tgt_control_port: %d
resources:
  - name: %s
    policy: reservations
    net_threshold: %v
    capacity_mb_s: %v
    reservations:
      - consumer: %s
        bytes: %d
        period: %v
`, backend, http, lab.TgtdPort, r.Res.Name, resvNetThres, float64(resvLinkMbit)/8, lab.HostAddr(resvHost), resvBytes, resvPeriod)
	return os.WriteFile(path, []byte(y), 0o644)
}

type resvSample struct {
	t float64
	// wall is when the sample was taken: with t, it maps the agent's
	// period boundaries (wall clock) onto the phase's time.
	wall     time.Time
	st       agent.ResourceStatus
	maxDelay float64
}

// runReservations runs each load with the agent off and with the
// reservations policy, and summarizes the periods the reserved writer got.
func runReservations(r *runner) (any, error) {
	// A leftover limit from a killed run would make every phase net-bound.
	if err := removeLinkLimit(); err != nil {
		return nil, err
	}
	length := r.Scale(60 * time.Second)
	from, to := r.Scale(10*time.Second), length-time.Second
	sum := ResvSummary{Experiment: "reservations", Scale: r.opts.Scale, LinkMbit: resvLinkMbit, Consumer: lab.HostAddr(resvHost).String(),
		ReservedMB: resvBytes / 1e6, PeriodS: resvPeriod.Seconds()}
	var all []*lab.PhaseResult
	var qSeries, dSeries, aSeries []report.Series
	for _, load := range []string{"net-bound", "disk-bound"} {
		for _, mode := range []string{"off", "reservations"} {
			backend := "delayline"
			if mode == "off" {
				// The agent runs with the same policy on the dry-run backend:
				// its indicators are measured, nothing is throttled.
				backend = "dry-run"
			}
			cfg := filepath.Join(r.Dir, fmt.Sprintf("agent-%s-%s.yaml", load, mode))
			if err := r.resvAgentConfig(cfg, backend, ""); err != nil {
				return nil, err
			}
			undo := func() error { return nil }
			if load == "net-bound" {
				u, err := limitLink(resvLinkMbit)
				if err != nil {
					return nil, err
				}
				undo = u
			}
			res, samples, err := r.resvPhase(load, mode, backend, cfg, length, from, to, r.resvJobs(length))
			err = cmp.Or(err, undo())
			if err != nil {
				return nil, err
			}
			all = append(all, res)
			run := resvRun(res, samples, load, mode, from, to)
			sum.Runs = append(sum.Runs, run)
			label := load + ", agent " + mode
			q, d := resvIndicatorSeries(label, mode, samples)
			qSeries, dSeries = append(qSeries, q), append(dSeries, d)
			if load == "net-bound" {
				aSeries = append(aSeries, resvAttainedSeries(label, run))
			}
		}
	}
	sum.runTCP = tcpOf(all)
	return sum, r.resvPlots(qSeries, dSeries, aSeries)
}

// resvJobs are one phase's jobs: the reserved writer, a small random
// reader, and three bulk writers on each of b3 and b4.
func (r *runner) resvJobs(length time.Duration) []lab.Job {
	js := []lab.Job{
		{Name: "reserved", Host: resvHost, URL: r.LUN(resvHost).URL, RW: "write", BS: 64 << 10, Rate: resvFioRate, Runtime: length, Size: 256 << 20},
		{Name: "smalljob", Host: "b5", URL: r.LUN("b5").URL, RW: "randread", BS: 8 << 10, Rate: 256 << 10, Runtime: length},
	}
	for _, h := range []string{"b3", "b4"} {
		js = append(js, r.writer(h, 3, length))
	}
	return js
}

// resvPhase runs one phase with an agent, sampling its status every 200 ms
// and the target's TCP_INFO (ss -tin) once in the middle, as a fixture of
// real network signals.
func (r *runner) resvPhase(load, mode, backend, cfg string, length, from, to time.Duration, jobs []lab.Job) (*lab.PhaseResult, []resvSample, error) {
	a, err := lab.StartAgent(backend, r.Dir, "--config", cfg)
	if err != nil {
		return nil, nil, err
	}
	p := &lab.Phase{Name: load + "-" + mode, Label: load + ", agent " + mode, Length: length, From: from, To: to, Jobs: jobs}
	var samples []resvSample
	for t := 500 * time.Millisecond; t < length; t += 200 * time.Millisecond {
		p.Events = append(p.Events, lab.Event{At: t, Name: "agent status", Do: func() error {
			var st agent.Status
			if err := a.Status(&st); err != nil {
				return err
			}
			for _, rs := range st.Resources {
				if rs.Name != r.Res.Name {
					continue
				}
				s := resvSample{t: t.Seconds(), wall: time.Now(), st: rs}
				for _, c := range rs.Consumers {
					if mode != "off" {
						s.maxDelay = math.Max(s.maxDelay, ms(max(c.Setting.ReadDelay, c.Setting.WriteDelay)))
					}
				}
				samples = append(samples, s)
			}
			return nil
		}})
	}
	p.Events = append(p.Events, lab.Event{At: (from + to) / 2, Name: "ss -tin", Do: func() error {
		out, err := lab.InNS(lab.TargetNS, "ss", "-tinH", "state", "established", "sport", "= :3260")
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(r.Dir, p.Name+"-ss-tin.txt"), []byte(out), 0o644)
	}})
	res, err := r.Run(p, 0)
	err = cmp.Or(err, a.Stop())
	return res, samples, err
}
