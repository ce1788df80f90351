package experiments

import (
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// BurstFigures show one class's burst allowance: credit banked below its
// objective, spent above it, and what the policy did once it was gone.
type BurstFigures struct {
	Class  string  `json:"class"`
	BurstS float64 `json:"burst_s"`
	// The class ran at LowRatio × its objective from LowFromS, then at
	// BurstRatio × from BurstFromS to BurstToS.
	LowRatio   float64 `json:"low_ratio"`
	BurstRatio float64 `json:"burst_ratio"`
	LowFromS   float64 `json:"low_from_s"`
	BurstFromS float64 `json:"burst_from_s"`
	BurstToS   float64 `json:"burst_to_s"`
	// CreditAtBurstS is the credit the agent reported when the burst
	// began (at most BurstS).
	CreditAtBurstS float64 `json:"credit_at_burst_s"`
	// AllowanceS is how long into the burst the class ran before the
	// agent first flagged it exceeding; ExpectedAllowanceS is
	// credit / (attained ratio − 1), what the credit should buy.
	AllowanceS         agent.JSONFloat `json:"allowance_s"`
	ExpectedAllowanceS agent.JSONFloat `json:"expected_allowance_s"`
	// The class's IOPS (diskstats) and the delay the agent put on it,
	// while it had credit and after.
	IOPSWithCredit     agent.JSONFloat `json:"iops_with_credit"`
	IOPSAfterCredit    agent.JSONFloat `json:"iops_after_credit"`
	DelayWithCreditMs  float64         `json:"delay_with_credit_ms"`
	DelayAfterCreditMs float64         `json:"delay_after_credit_ms"`
	// Classes are every class's figures over the burst (from BurstFromS).
	Classes []ClassFigures `json:"classes"`
}

// The burst phase's plan: the knowledge class reads at half its objective
// (banking credit), then at three times it (spending it), with the other
// classes and the bulk writer as in the main phase.
const (
	burstLowRatio  = 0.5
	burstHighRatio = 3
	burstClass     = "knowledge"
)

// runSLOBurst runs the burst phase under the policy.
func (r *runner) runSLOBurst() (BurstFigures, *lab.PhaseResult, []StatusSample, error) {
	sc := r.Scale
	low, high, tail := sc(25*time.Second), sc(20*time.Second), sc(5*time.Second)
	length := low + high + tail
	cfg := filepath.Join(r.Dir, "agent-burst.yaml")
	if err := r.sloAgentConfig(cfg, "delayline", "127.0.0.1:9313", r.opts.Scale); err != nil {
		return BurstFigures{}, nil, nil, err
	}
	a, err := lab.StartAgentNamed("burst", "delayline", r.Dir, "--config", cfg)
	if err != nil {
		return BurstFigures{}, nil, nil, err
	}
	var cl LabSLOClass
	for _, c := range SLOLabClasses {
		if c.Name == burstClass {
			cl = c
		}
	}
	jobs := r.sloJobs(length, burstClass)
	url := r.LUN(cl.Host).URL
	jobs = append(jobs,
		lab.Job{Name: "low", Host: cl.Host, URL: url, RW: "randread", BS: sloBS, Rate: int(burstLowRatio * cl.MBs * 1e6), Runtime: low},
		lab.Job{Name: "burst", Host: cl.Host, URL: url, RW: "randread", BS: sloBS, Rate: int(burstHighRatio * cl.MBs * 1e6), Start: low, Runtime: high},
		lab.Job{Name: cl.Name, Host: cl.Host, URL: url, RW: "randread", BS: sloBS, Rate: int(cl.MBs * 1e6), Start: low + high, Runtime: tail})
	p := &lab.Phase{Name: "burst", Label: fmt.Sprintf("%s at %.1f× then %.0f× its objective", cl.Name, burstLowRatio, float64(burstHighRatio)),
		Length: length, From: low, To: low + high, Jobs: jobs}
	res, polls, err := r.runPolled(p, a, length)
	if err != nil {
		return BurstFigures{}, nil, nil, err
	}
	return SummarizeBurst(cl, r.opts.Scale, res, polls, low, low+high), res, polls, nil
}

// SummarizeBurst computes the burst figures of class c (its burst scaled
// by scale, as the agent was configured) from the burst phase's trace and
// polls; the burst ran over (from, to].
func SummarizeBurst(c LabSLOClass, scale float64, res *lab.PhaseResult, polls []StatusSample, from, to time.Duration) BurstFigures {
	b := BurstFigures{Class: c.Name, BurstS: report.Round(c.Burst.Seconds()*scale, 3), LowRatio: burstLowRatio, BurstRatio: burstHighRatio,
		BurstFromS: from.Seconds(), BurstToS: to.Seconds(), AllowanceS: jf(math.NaN(), 0), ExpectedAllowanceS: jf(math.NaN(), 0),
		IOPSWithCredit: jf(math.NaN(), 0), IOPSAfterCredit: jf(math.NaN(), 0)}
	// The credit when the burst began: the last poll before it.
	exceedAt := math.NaN()
	var dWith, dAfter float64
	var nWith, nAfter int
	for _, s := range polls {
		cs := s.class(c.Name)
		if cs == nil {
			continue
		}
		switch {
		case s.T <= from.Seconds():
			b.CreditAtBurstS = report.Round(cs.CreditS, 3)
		case s.T <= to.Seconds():
			if cs.Exceeding && math.IsNaN(exceedAt) {
				exceedAt = s.T
			}
			if math.IsNaN(exceedAt) {
				dWith += cs.DelayMs
				nWith++
			} else {
				dAfter += cs.DelayMs
				nAfter++
			}
		}
	}
	if nWith > 0 {
		b.DelayWithCreditMs = report.Round(dWith/float64(nWith), 2)
	}
	if nAfter > 0 {
		b.DelayAfterCreditMs = report.Round(dAfter/float64(nAfter), 2)
	}
	split := to
	if !math.IsNaN(exceedAt) {
		b.AllowanceS = jf(exceedAt-from.Seconds(), 2)
		split = time.Duration(exceedAt * float64(time.Second))
	}
	cf := c
	cf.Burst = time.Duration(float64(c.Burst) * scale)
	withF := ComputeClassFigures(cf, res.Between(from, split))
	b.IOPSWithCredit = withF.IOPS
	if split < to {
		b.IOPSAfterCredit = ComputeClassFigures(cf, res.Between(split, to)).IOPS
	}
	if r := float64(withF.IOPS) / c.IOPS; r > 1 {
		b.ExpectedAllowanceS = jf(b.CreditAtBurstS/(r-1), 2)
	}
	for _, k := range SLOLabClasses {
		k.Burst = time.Duration(float64(k.Burst) * scale)
		f := ComputeClassFigures(k, res.Between(from, to))
		f.Agent = AgentFigures(k, polls, from, to)
		b.Classes = append(b.Classes, f)
	}
	return b
}

// plotBurst draws the burst phase: every class's credit from the agent,
// and the bursting class's IOPS ratio to its objective.
func plotBurst(path string, res *lab.PhaseResult, polls []StatusSample, b BurstFigures) error {
	var series []report.Series
	for _, c := range SLOLabClasses {
		series = append(series, pollSeries(c.Name+" credit (s)", polls, c.Name, func(cs *agent.ClassStatus) float64 { return cs.CreditS }))
		if c.Name == b.Class {
			x, y := classSeries(res.Ticks, c.Host, func(ct report.ClassTick) float64 { return ct.IOs / ct.Dt / c.IOPS })
			series = append(series, report.Series{Name: c.Name + " IOPS / objective", X: x, Y: report.Smooth(y)},
				pollSeries(c.Name+" delay (10 ms)", polls, c.Name, func(cs *agent.ClassStatus) float64 { return cs.DelayMs / 10 }))
		}
	}
	return report.TimePlot(path, fmt.Sprintf("slo-classes burst: %s banks credit at %.1f×, spends it at %.0f× its objective", b.Class, b.LowRatio, b.BurstRatio),
		"time (s)", "credit (s) / ratio / delay (10 ms)", series, []report.Line{{Name: "objective (ratio 1)", Y: 1}})
}
