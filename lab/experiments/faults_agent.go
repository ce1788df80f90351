package experiments

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/throttle"
)

// The reliability experiment's faults on the agent itself: killed with
// SIGKILL while it throttles, and what a crash leaves for the next one.

// labelledObjects lists the iptables rules and ipsets in the target
// namespace that carry label: what a crashed agent would leave behind.
func labelledObjects(label string) ([]string, error) {
	var out []string
	rules, err := lab.InNS(lab.TargetNS, "iptables-save")
	if err != nil {
		return nil, err
	}
	for _, l := range strings.Split(rules, "\n") {
		if strings.Contains(l, label) {
			out = append(out, "rule "+l)
		}
	}
	sets, err := lab.InNS(lab.TargetNS, "ipset", "list", "-n")
	if err != nil {
		return nil, err
	}
	for _, l := range strings.Fields(sets) {
		if strings.HasPrefix(l, label) {
			out = append(out, "set "+l)
		}
	}
	return out, nil
}

// faultKill9 kills the delay-line agent while it delays a writer's
// traffic and measures how soon the writer runs at its unthrottled rate
// again, with its data checked end to end.
func faultKill9(r *runner) Fault {
	return killWhileThrottled(r, "delayline", "write", throttle.Setting{WriteDelay: 20 * time.Millisecond, ReadDelay: 20 * time.Millisecond}, time.Second,
		"agent killed (SIGKILL) while delaying a writer (delay line)")
}

// faultKill9Marks does the same to the HTB backend, whose marks live in
// ipset entries with a TTL that only the running agent refreshes (netem
// uses the same marks; this kernel has no netem to run it). A rate cap
// shapes what the target sends, so the load is a reader.
func faultKill9Marks(r *runner) Fault {
	return killWhileThrottled(r, "htb", "read", throttle.Setting{Rate: 1 << 20}, throttle.DefaultMarkTTL+time.Second,
		"agent killed (SIGKILL) while capping a reader (HTB; netem's marks lapse the same way)")
}

// killWhileThrottled measures host b3's unthrottled rate of rw (read or
// write), throttles it with s, kills the agent and finds how long until
// b3 runs at half its unthrottled rate again.
func killWhileThrottled(r *runner, backend, rw string, s throttle.Setting, within time.Duration, name string) Fault {
	f := Fault{Name: name, Expect: fmt.Sprintf("%ss back at ≥ 50 %% of the unthrottled rate within %v; no fio I/O or verify error", rw, within), Data: "n/a (reads)"}
	a, err := lab.StartAgent(backend, r.Dir)
	if err != nil {
		return failed(f, err)
	}
	defer func() {
		if a.Alive() {
			a.Stop()
		}
	}()
	rate := rateOf(rw)
	mean := func(res *lab.PhaseResult, from, to time.Duration) float64 {
		return report.Describe(report.Values(res.Between(from, to), "b3", rate)).Mean
	}
	job := lab.Job{Name: rw + "r", Host: "b3", URL: r.LUN("b3").URL, RW: rw, BS: 64 << 10, NumJobs: 2, Runtime: 3 * time.Second}
	ref, err := f.run(r, &lab.Phase{Name: "kill9-reference-" + backend, Label: "kill -9: unthrottled reference", Length: 3 * time.Second, From: 500 * time.Millisecond, To: 3 * time.Second,
		Jobs: []lab.Job{job}})
	if err != nil {
		return failed(f, err)
	}
	r0 := mean(ref, 500*time.Millisecond, 3*time.Second)
	if err := a.Set(map[netip.Addr]throttle.Setting{lab.HostAddr("b3"): s}); err != nil {
		return failed(f, err)
	}
	job.Runtime = killAt + 3*time.Second
	if rw == "write" {
		job = r.verifiedWriter("b3", 2, 12<<20)
		f.Data = "yes: fio crc32c, 24 MiB"
	}
	p := &lab.Phase{Name: "kill9-" + backend, Label: "kill -9 while throttled (" + backend + ")", Length: 20 * time.Second, From: 500 * time.Millisecond, To: killAt + 2*time.Second,
		Jobs:   []lab.Job{job},
		Events: []lab.Event{{At: killAt, Name: "kill -9 agent", Do: func() error { a.Kill(); return nil }}}}
	res, err := f.run(r, p)
	if err != nil {
		if rw == "write" {
			f.Data = "**failed**"
		}
		return failed(f, err)
	}
	rt := mean(res, 500*time.Millisecond, killAt)
	recovery := math.Inf(1)
	for _, t := range res.Between(killAt, p.Length) {
		if iv, ok := t.Dev["b3"]; ok && rate(iv) >= 0.5*r0 {
			recovery = t.T - killAt.Seconds()
			break
		}
	}
	f.Result = fmt.Sprintf("b3 %ss %.1f MB/s unthrottled, %.1f throttled; ≥ 50 %% again %.1f s after the kill", rw, r0, rt, recovery)
	f.Pass = recovery <= within.Seconds() && rt < 0.5*r0
	return f
}

// faultStaleObjects crashes an agent that has throttles applied and
// checks that a restarted agent (same label) replaces what it left, and
// that `sanqos cleanup` removes it by hand after a second crash.
func faultStaleObjects(r *runner) Fault {
	f := Fault{Name: "restart after a crash; `sanqos cleanup`", Expect: "a new agent removes the stale rules and sets before adding its own; cleanup leaves none", Data: "n/a"}
	crash := func() ([]string, error) {
		a, err := lab.StartAgent("delayline", r.Dir)
		if err != nil {
			return nil, err
		}
		objs, err := labelledObjects(labAgentLabel)
		if err == nil {
			err = a.Set(map[netip.Addr]throttle.Setting{lab.HostAddr("b4"): {WriteDelay: 5 * time.Millisecond}})
		}
		a.Kill()
		return objs, err
	}
	first, err := crash()
	if err != nil {
		return failed(f, err)
	}
	stale, err := labelledObjects(labAgentLabel)
	if err != nil {
		return failed(f, err)
	}
	// The second agent starts over the first one's leftovers.
	second, err := crash()
	if err != nil {
		return failed(f, err)
	}
	bin, err := lab.SanqosExecutable()
	if err != nil {
		return failed(f, err)
	}
	if out, err := lab.InNS(lab.TargetNS, bin, "cleanup", "--label", labAgentLabel); err != nil {
		return failed(f, fmt.Errorf("sanqos cleanup: %v: %s", err, out))
	}
	left, err := labelledObjects(labAgentLabel)
	if err != nil {
		return failed(f, err)
	}
	f.Result = fmt.Sprintf("a fresh agent owns %d objects; %d left after kill -9; the agent restarted over them owned %d; %d left after `sanqos cleanup`",
		len(first), len(stale), len(second), len(left))
	f.Pass = len(stale) > 0 && strings.Join(second, "\n") == strings.Join(first, "\n") && len(left) == 0
	return f
}
