package experiments

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// overhead: Throughput with vs without idle throttle rules (thesis §5.8).
func init() {
	register(&Experiment{Name: "overhead", DefaultScale: 0.25, Flags: []*Flag{flagBackends},
		Title: "Throughput with vs without idle throttle rules on a RAM LUN, Welch t-test (§5.8)", Run: func(r *runner) (any, error) { return r.eachBackend("overhead", r.overhead) }})
}

var errNoRAM = errors.New("this lab has no RAM LUN: rebuild it with `sanqos-lab lab down && sanqos-lab lab up`")

// OverheadDirection is one direction's result.
type OverheadDirection struct {
	// OverheadPct is the mean extra time to move the data with idle rules,
	// relative to without; CI99Pct its 99 % confidence interval (Welch).
	OverheadPct  float64    `json:"overhead_pct"`
	CI99Pct      [2]float64 `json:"ci99_pct"`
	P            float64    `json:"p"`
	BaseMBs      float64    `json:"base_mb_s"`
	IdleRulesMBs float64    `json:"idle_rules_mb_s"`
	BaseS        []float64  `json:"base_s"`
	IdleRulesS   []float64  `json:"idle_rules_s"`
}

// OverheadSummary is summary.json of overhead.
type OverheadSummary struct {
	Experiment string `json:"experiment"`
	backendFields
	RunS    float64           `json:"seconds_per_run"`
	Repeats int               `json:"repeats"`
	Read    OverheadDirection `json:"read"`
	Write   OverheadDirection `json:"write"`
	// Interleaved is the same question asked more precisely: per
	// direction one long transfer with the rules taken out and put back
	// every 2 s, compared window pair by window pair (paired t).
	Interleaved map[string]InterleavedDirection `json:"interleaved"`
	// InterleavedSkipped says why there is no interleaved measurement.
	InterleavedSkipped string `json:"interleaved_skipped,omitempty"`
	runTCP
}

// runOverhead reads and writes the RAM LUN, alternating runs without any
// sanqos rule and with the agent's rules installed but idle (no consumer
// throttled), 20 times each, as thesis §5.8 did. The thesis timed 512 MB
// transfers; here each run is time-based and fio's bandwidth over its I/O
// phase is used, because on this VM the session setup of a short transfer
// varied more than the effect being measured (±10 % CIs with 128 MB runs).
// Results are expressed as the time to move 512 MB. Then the interleaved
// measurement (overhead_interleaved.go) asks the same within one transfer.

func (r *runner) overhead(backend string) (backendRun, error) {
	if r.State.RAM == nil {
		return nil, errNoRAM
	}
	lun := r.State.RAM.LUNs[0]
	runFor := max(r.Scale(12*time.Second), 2*time.Second)
	const ref = 512e6 // bytes: results as seconds per 512 MB
	reps := max(r.opts.Repeat, 20)
	sum := &OverheadSummary{Experiment: "overhead", RunS: runFor.Seconds(), Repeats: reps}
	var all []*lab.PhaseResult
	for _, dir := range []string{"read", "write"} {
		var base, idle []float64
		p := &lab.Phase{Name: "ram-" + dir, Label: "RAM LUN " + dir, Length: runFor + time.Minute, From: 0, To: runFor,
			Jobs: []lab.Job{{Name: "move", Host: "b2", URL: lun.URL, RW: dir, BS: 64 << 10, Runtime: runFor}}}
		for rep := 0; rep < reps; rep++ {
			// Alternate the order so slow drift does not favour one side.
			for k := 0; k < 2; k++ {
				withRules := (rep+k)%2 == 1
				var a *lab.LabAgent
				var err error
				if withRules {
					if a, err = r.startAgent(backend); err != nil {
						return nil, err
					}
				}
				name := p.Name
				p.Name = fmt.Sprintf("%s-%s", name, map[bool]string{true: "rules", false: "none"}[withRules])
				res, err := r.Run(p, rep)
				pdir := fmt.Sprintf("%s/%s.r%d/b2.json", r.Dir, p.Name, rep)
				p.Name = name
				if a != nil {
					err = cmp.Or(err, a.Stop())
				}
				if err != nil {
					return nil, err
				}
				all = append(all, res)
				mbs, err := fioMBs(pdir, dir)
				if err != nil {
					return nil, err
				}
				secs := ref / 1e6 / mbs
				if withRules {
					idle = append(idle, secs)
				} else {
					base = append(base, secs)
				}
			}
		}
		w := report.WelchTest(base, idle, 0.99)
		d := OverheadDirection{OverheadPct: report.Round(100*w.Diff/w.MeanA, 3),
			CI99Pct: [2]float64{report.Round(100*w.CI[0]/w.MeanA, 3), report.Round(100*w.CI[1]/w.MeanA, 3)}, P: report.Round(w.P, 4),
			BaseMBs: report.Round(ref/1e6/w.MeanA, 2), IdleRulesMBs: report.Round(ref/1e6/w.MeanB, 2), BaseS: base, IdleRulesS: idle}
		if dir == "read" {
			sum.Read = d
		} else {
			sum.Write = d
		}
	}
	// Between whole runs the VM's drift (5–9 % run to run here) swamps a
	// sub-percent effect; within one transfer, adjacent seconds share it.
	// Taking rules out and putting them back mid-transfer is done to the
	// delay line's iptables rules; the qdisc backends' trees are not
	// toggled that way.
	if backend == "delayline" {
		il, res, err := runInterleavedBoth(r)
		all = append(all, res...)
		if err != nil {
			return nil, err
		}
		sum.Interleaved = il
	} else {
		sum.InterleavedSkipped = "the interleaved measurement toggles the delay line's iptables rules; " + backend + " installs a qdisc tree instead"
	}
	sum.runTCP = tcpOf(all)
	return sum, nil
}
