package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// reliability: Faults injected while throttling, and a soak.
type reliability struct{}

func (reliability) Spec() Spec {
	return Spec{Name: "reliability", DefaultScale: 1, Flags: FlagAgentSet | FlagLUNMap,
		Title: "Faults injected while throttling (kill -9, crash recovery, tgtd restart, new initiator address, LUN and device removal, clock jumps, the delay line at its limits) and a 30-minute soak (× scale)"}
}

func (reliability) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runReliability(wrap(r, o))
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
	rate := func(iv sample.Interval) float64 { return iv.WriteBps / 1e6 }
	if rw == "read" {
		rate = func(iv sample.Interval) float64 { return iv.ReadBps / 1e6 }
	}
	mean := func(res *lab.PhaseResult, from, to time.Duration) float64 {
		var v []float64
		for _, t := range res.Between(from, to) {
			if iv, ok := t.Dev["b3"]; ok {
				v = append(v, rate(iv))
			}
		}
		return report.Describe(v).Mean
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

// controlledLoad is the pid/autonomic load: the reader on b2 and writers on
// the other hosts (writerHosts), plus an optional verified writer.
func (r *runner) controlledLoad(name, label string, length time.Duration, writerHosts []string, perHost int) *lab.Phase {
	p := &lab.Phase{Name: name, Label: label, Length: length, From: time.Second, To: length}
	p.Jobs = []lab.Job{r.reader(length)}
	for _, h := range writerHosts {
		p.Jobs = append(p.Jobs, lab.Job{Name: "writer", Host: h, URL: r.LUN(h).URL, RW: "write", BS: 64 << 10, NumJobs: perHost, Runtime: length,
			Size: r.State.Options.LUNSize / int64(perHost) / 65536 * 65536})
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

// throttledSampler records, every 500 ms of the phase, which consumers
// the agent throttles.
func throttledSampler(a *lab.LabAgent, length time.Duration) (throttleLog, []lab.Event) {
	seen := throttleLog{}
	var ev []lab.Event
	for t := 500 * time.Millisecond; t < length; t += 500 * time.Millisecond {
		t := t
		ev = append(ev, lab.Event{At: t, Name: "sample throttles", Do: func() error {
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
	return seen, ev
}

// faultTgtdRestart kills tgtd under full load; lab serve restarts it and
// restores the targets. fio's libiscsi reconnects but reports the new
// target's UNIT ATTENTION (bus reset) as an I/O error, where a kernel
// initiator would retry the command, so the load is started again after
// the restart: the agent must still be running and throttle it.
func faultTgtdRestart(r *runner) Fault {
	f := Fault{Name: "tgtd killed and restarted under load", Expect: "agent keeps running, rediscovers, throttles the load started after the restart; ≤ 3 warnings", Data: "n/a (the target crashed)"}
	a, err := r.startAutonomic("tgtd")
	if err != nil {
		return failed(f, err)
	}
	defer a.Stop()
	w0 := a.Warnings()
	length := 8 * time.Second
	p := r.controlledLoad("tgtd-kill", "tgtd killed at 4 s", length, lab.Hosts[1:], 4)
	p.Events = []lab.Event{{At: 4 * time.Second, Name: "kill tgtd", Do: func() error {
		pids := lab.FindProcs(lab.IsOurTgtd)
		if len(pids) == 0 {
			return errors.New("no tgtd to kill")
		}
		lab.KillAll(pids)
		return nil
	}}}
	killed, err := f.run(r, p)
	fioNote := "fio ran through the restart"
	if err != nil {
		if killed == nil || killed.FioErr == nil {
			return failed(f, err)
		}
		fioNote = "fio (libiscsi) failed on the UNIT ATTENTION after reconnecting"
	}
	if werr := lab.WaitFor("tgtd back", 15*time.Second, lab.TgtReady); werr != nil {
		return failed(f, werr)
	}
	p = r.controlledLoad("tgtd-after", "load after the restart", length, lab.Hosts[1:], 4)
	seen, events := throttledSampler(a, length)
	p.Events = events
	_, err = f.run(r, p)
	if err != nil {
		return failed(f, err)
	}
	after := seen.count(0, nil)
	f.LogLines = a.Warnings() - w0
	f.Result = fmt.Sprintf("%s; agent alive: %v; after the restart it throttled in %d of %d samples", fioNote, a.Alive(), after, len(seen))
	if len(seen) == 0 {
		f.Result = fmt.Sprintf("%s; agent alive: %v; after the restart it throttled in no sample", fioNote, a.Alive())
	}
	f.Pass = a.Alive() && after > 0 && f.LogLines <= 3
	return f
}

// faultNewAddress moves an initiator to a new address between two runs:
// its sessions end, new ones come from the new address. The agent must
// throttle the new address and never the old one once discovery has seen
// the change.
func faultNewAddress(r *runner) Fault {
	f := Fault{Name: "initiator reconnects from a new address", Expect: "old address no longer throttled after rediscovery (1 s); new one throttled", Data: "n/a"}
	a, err := r.startAutonomic("addr")
	if err != nil {
		return failed(f, err)
	}
	defer a.Stop()
	w0 := a.Warnings()
	length := 8 * time.Second
	if _, err := r.Run(r.controlledLoad("addr-before", "b4 at its address", length, lab.Hosts[1:], 4), 0); err != nil {
		return failed(f, err)
	}
	old := lab.HostAddr("b4")
	moved := netip.AddrFrom4([4]byte{old.As4()[0], old.As4()[1], old.As4()[2], old.As4()[3] + 10})
	if err := moveAddr("b4", old, moved); err != nil {
		return failed(f, err)
	}
	defer moveAddr("b4", moved, old)
	p := r.controlledLoad("addr-after", "b4 at a new address", length, lab.Hosts[1:], 4)
	seen, events := throttledSampler(a, length)
	p.Events = events
	_, err = f.run(r, p)
	if err != nil {
		return failed(f, err)
	}
	oldSeen, newSeen := seen.count(1500*time.Millisecond, is(old)), seen.count(0, is(moved))
	f.LogLines = a.Warnings() - w0
	f.Result = fmt.Sprintf("%v throttled in %d samples after 1.5 s; %v (new) in %d", old, oldSeen, moved, newSeen)
	f.Pass = oldSeen == 0 && newSeen > 0 && a.Alive()
	return f
}

// moveAddr replaces host's address. Delete first: deleting a primary
// address also deletes its secondaries (unless promote_secondaries is on).
func moveAddr(host string, from, to netip.Addr) error {
	if _, err := lab.Exec("ip", "-n", host, "addr", "del", from.String()+"/24", "dev", "eth0"); err != nil {
		return err
	}
	_, err := lab.Exec("ip", "-n", host, "addr", "add", to.String()+"/24", "dev", "eth0")
	return err
}

// faultLUNRemoved deletes a throttled consumer's LUN. tgt refuses while
// the LUN has a session ("this logical unit is still active"), so it goes
// right after the consumer's session ends, while the agent still delays
// the consumer; then the others run on.
func faultLUNRemoved(r *runner) Fault {
	f := Fault{Name: "LUN removed while its consumer is throttled", Expect: "the consumer is released and never throttled again; agent keeps running", Data: "n/a"}
	a, err := r.startAutonomic("lun")
	if err != nil {
		return failed(f, err)
	}
	defer a.Stop()
	w0 := a.Warnings()
	length := 8 * time.Second
	if _, err := r.Run(r.controlledLoad("lun-before", "all writers", length, lab.Hosts[1:], 4), 0); err != nil {
		return failed(f, err)
	}
	lun := r.LUN("b5")
	m, err := a.List()
	if err != nil {
		return failed(f, err)
	}
	_, wasThrottled := m[lab.HostAddr("b5")]
	if _, err := lab.Tgtadm("--op", "delete", "--mode", "logicalunit", "--tid", strconv.Itoa(r.Res.TID), "--lun", strconv.Itoa(lun.Number)); err != nil {
		return failed(f, err)
	}
	flags, _ := lab.DirectIOFlags(lun.Backing)
	defer lab.Tgtadm(append([]string{"--op", "new", "--mode", "logicalunit", "--tid", strconv.Itoa(r.Res.TID), "--lun", strconv.Itoa(lun.Number),
		"--backing-store", lun.Backing}, flags...)...)
	p := r.controlledLoad("lun-after", "b5's LUN removed", length, []string{"b3", "b4"}, 6)
	seen, events := throttledSampler(a, length)
	p.Events = events
	_, err = f.run(r, p)
	if err != nil {
		return failed(f, err)
	}
	b5, others := seen.count(1500*time.Millisecond, is(lab.HostAddr("b5"))), seen.count(0, not(lab.HostAddr("b5")))
	f.LogLines = a.Warnings() - w0
	f.Result = fmt.Sprintf("b5 throttled when its LUN went: %v; b5 throttled in %d samples after 1.5 s; b3/b4 in %d", wasThrottled, b5, others)
	f.Pass = b5 == 0 && others > 0 && a.Alive()
	return f
}

// faultDeviceGone makes a device of a statically configured resource
// disappear from /proc/diskstats mid-run.
func faultDeviceGone(r *runner) Fault {
	f := Fault{Name: "a resource's device disappears", Expect: "agent keeps running and throttling on the remaining devices; ≤ 1 warning", Data: "n/a"}
	img := filepath.Join(lab.StoreDir, "vanishing.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		return failed(f, err)
	}
	defer os.Remove(img)
	dev, err := lab.Exec("losetup", "--find", "--show", img)
	if err != nil {
		return failed(f, err)
	}
	dev = strings.TrimSpace(dev)
	defer lab.Exec("losetup", "-d", dev)
	var devs, thr []string
	for _, l := range r.Res.LUNs {
		devs = append(devs, l.Loop)
		if l.Host != "b2" {
			thr = append(thr, lab.HostAddr(l.Host).String())
		}
	}
	devs = append(devs, filepath.Base(dev))
	cfg := filepath.Join(r.Dir, "agent-device.yaml")
	y := fmt.Sprintf("backend: delayline\nhttp: 127.0.0.1:9311\nthreshold: 15ms\ndiscovery:\n  source: static\nresources:\n  - name: %s\n    devices: [%s]\n    important: [%s]\n    throttleable: [%s]\n",
		r.Res.Name, strings.Join(devs, ", "), lab.HostAddr("b2"), strings.Join(thr, ", "))
	if err := os.WriteFile(cfg, []byte(y), 0o644); err != nil {
		return failed(f, err)
	}
	a, err := lab.StartAgent("delayline", r.Dir, "--config", cfg)
	if err != nil {
		return failed(f, err)
	}
	defer a.Stop()
	w0 := a.Warnings()
	length := 10 * time.Second
	p := r.controlledLoad("device-gone", "extra device detached at 3 s", length, lab.Hosts[1:], 4)
	seen, events := throttledSampler(a, length)
	p.Events = append(events, lab.Event{At: 3 * time.Second, Name: "detach device", Do: func() error {
		_, err := lab.Exec("losetup", "-d", dev)
		return err
	}})
	_, err = f.run(r, p)
	if err != nil {
		return failed(f, err)
	}
	after := seen.count(5*time.Second, nil)
	f.LogLines = a.Warnings() - w0
	f.Result = fmt.Sprintf("%s detached at 3 s; agent alive: %v; throttling in %d samples after 5 s", filepath.Base(dev), a.Alive(), after)
	f.Pass = a.Alive() && after > 0 && f.LogLines <= 1
	return f
}

// faultClockJump steps the wall clock an hour forward and back again
// under load. The agent measures intervals on the monotonic clock, so
// neither step may show up as a bogus interval.
func faultClockJump(r *runner) Fault {
	f := Fault{Name: "wall clock steps +1 h, then back", Expect: "no bogus interval: the indicator stays finite and regulation continues", Data: "n/a"}
	a, err := r.startAutonomic("clock")
	if err != nil {
		return failed(f, err)
	}
	defer a.Stop()
	w0 := a.Warnings()
	length := 10 * time.Second
	p := r.controlledLoad("clock-jump", "clock +1 h at 3 s, -1 h at 6 s", length, lab.Hosts[1:], 4)
	seen, events := throttledSampler(a, length)
	var stepped time.Duration // net wall-clock offset we applied
	step := func(d time.Duration) func() error {
		return func() error {
			tv := syscall.NsecToTimeval(time.Now().Add(d).UnixNano())
			if err := syscall.Settimeofday(&tv); err != nil {
				return err
			}
			stepped += d
			return nil
		}
	}
	p.Events = append(events,
		lab.Event{At: 3 * time.Second, Name: "clock +1h", Do: step(time.Hour)},
		lab.Event{At: 6 * time.Second, Name: "clock -1h", Do: step(-time.Hour)})
	_, err = f.run(r, p)
	if stepped != 0 {
		step(-stepped)() // never leave the machine's clock off
	}
	if err != nil {
		return failed(f, err)
	}
	var st struct {
		Resources []struct {
			IndicatorMs float64 `json:"indicator_ms"`
		} `json:"resources"`
	}
	if err := a.Status(&st); err != nil {
		return failed(f, err)
	}
	after := seen.count(6500*time.Millisecond, nil)
	ind := math.NaN()
	if len(st.Resources) > 0 {
		ind = st.Resources[0].IndicatorMs
	}
	f.LogLines = a.Warnings() - w0
	f.Result = fmt.Sprintf("indicator after both steps %.1f ms; throttling in %d samples after the step back", ind, after)
	f.Pass = a.Alive() && !math.IsNaN(ind) && !math.IsInf(ind, 0) && ind < 1000 && after > 0 && f.LogLines == 0
	return f
}

// faultCounterWrap feeds the sampler a real diskstats line whose 32-bit
// tick counters wrap between two samples. The kernel takes 49.7 days to do
// that, so this row is computed in-process from captured counters.
func faultCounterWrap(r *runner) Fault {
	f := Fault{Name: "diskstats counters wrap (32-bit ticks)", Expect: "the interval across the wrap equals the one without", Data: "n/a"}
	ds, err := sample.NewDiskstats("/proc", "/sys")
	if err != nil {
		return failed(f, err)
	}
	lun := r.LUN("b2").Loop
	c0, err := ds.Read(lun)
	if err != nil {
		return failed(f, err)
	}
	prev := c0[lun]
	cur := prev
	cur.Time = prev.Time.Add(100 * time.Millisecond)
	cur.Reads += 10
	cur.ReadTicks += 65
	cur.ReadSectors += 160
	want, err := sample.Diff(prev, cur)
	if err != nil {
		return failed(f, err)
	}
	// Same interval, with the tick counter 30 ms short of its wrap.
	const lim = 1 << 32
	prev.ReadTicks = lim - 30
	cur.ReadTicks = (prev.ReadTicks + 65) % lim
	got, err := sample.Diff(prev, cur)
	if err != nil {
		return failed(f, err)
	}
	f.Result = fmt.Sprintf("read wait %.2f ms across the wrap, %.2f ms without", got.ReadWaitMs, want.ReadWaitMs)
	f.Pass = got.ReadWaitMs == want.ReadWaitMs && got.Reads == want.Reads
	return f
}

// faultMaxDelay runs the heaviest load with every writer at the largest
// delay a throttle accepts, both directions.
func faultMaxDelay(r *runner) Fault {
	d := throttle.MaxDelay - time.Millisecond
	f := Fault{Name: fmt.Sprintf("delay line at maximum delay (%v both ways, 12 writers)", d), Expect: "no retransmission timeout and no retransmission beyond tail-loss probes", Data: "n/a"}
	a, err := lab.StartAgent("delayline", r.Dir)
	if err != nil {
		return failed(f, err)
	}
	defer a.Stop()
	set := map[netip.Addr]throttle.Setting{}
	for _, h := range lab.Hosts[1:] {
		set[lab.HostAddr(h)] = throttle.Setting{ReadDelay: d, WriteDelay: d}
	}
	if err := a.Set(set); err != nil {
		return failed(f, err)
	}
	_, err = f.run(r, r.controlledLoad("max-delay", "99 ms on every writer", 8*time.Second, lab.Hosts[1:], 4))
	if err != nil {
		return failed(f, err)
	}
	c, err := a.Counters()
	if err != nil {
		return failed(f, err)
	}
	var pkts uint64
	for _, v := range c {
		pkts += v.Packets
	}
	f.Result = fmt.Sprintf("%d packets delayed; %d retransmissions not from probes, %d timeouts", pkts, f.TCP.NonProbe(), f.TCP.Timeouts)
	f.Pass = pkts > 0 && f.TCP.NonProbe() == 0 && f.TCP.Timeouts == 0
	return f
}

// faultQueueLimit shrinks the delay line's queue until the load overruns
// it: packets must leave early, in order, not be dropped.
func faultQueueLimit(r *runner) Fault {
	const limit = 8
	f := Fault{Name: fmt.Sprintf("delay line queue full (limit %d packets, 20 ms, 12 writers)", limit), Expect: "limit reached; soonest-due packets leave early, in order; no timeout. Beyond the limit ACKs arrive with uneven delays, which RACK may read as loss: a few fast retransmits are the documented price", Data: "n/a"}
	a, err := lab.StartAgent("delayline", r.Dir, "--queue-limit", strconv.Itoa(limit))
	if err != nil {
		return failed(f, err)
	}
	defer a.Stop()
	set := map[netip.Addr]throttle.Setting{}
	for _, h := range lab.Hosts[1:] {
		set[lab.HostAddr(h)] = throttle.Setting{ReadDelay: 20 * time.Millisecond, WriteDelay: 20 * time.Millisecond}
	}
	if err := a.Set(set); err != nil {
		return failed(f, err)
	}
	_, err = f.run(r, r.controlledLoad("queue-limit", "queue limit 8", 8*time.Second, lab.Hosts[1:], 4))
	if err != nil {
		return failed(f, err)
	}
	c, err := a.Counters()
	if err != nil {
		return failed(f, err)
	}
	var pkts, early uint64
	for _, v := range c {
		pkts += v.Packets
		early += v.PassedAtLimit
	}
	f.Result = fmt.Sprintf("%d packets held, %d released early at the limit; %d retransmissions not from probes, %d timeouts", pkts, early, f.TCP.NonProbe(), f.TCP.Timeouts)
	f.Pass = early > 0 && f.TCP.Timeouts == 0
	return f
}

// SoakSample is the agent's footprint at one moment of the soak.
type SoakSample struct {
	T          float64 `json:"t_s"`
	RSSBytes   float64 `json:"rss_bytes"`
	Goroutines float64 `json:"goroutines"`
	FDs        float64 `json:"open_fds"`
}

// scrapeAgent reads the agent's own process metrics from its HTTP
// listener inside the target namespace.
func scrapeAgent(addr string) (SoakSample, error) {
	out, err := lab.InNS(lab.TargetNS, "curl", "-sf", "--max-time", "2", "http://"+addr+"/metrics")
	if err != nil {
		return SoakSample{}, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(out))
	if err != nil {
		return SoakSample{}, fmt.Errorf("agent metrics: %w", err)
	}
	gauge := func(name string) float64 {
		if mf := mfs[name]; mf != nil && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
		return 0
	}
	s := SoakSample{RSSBytes: gauge("process_resident_memory_bytes"), Goroutines: gauge("go_goroutines"), FDs: gauge("process_open_fds")}
	if s.RSSBytes == 0 || s.Goroutines == 0 {
		return s, errors.New("agent metrics lack process_resident_memory_bytes or go_goroutines")
	}
	return s, nil
}

// faultSoak runs the autonomic agent for 30 minutes × scale under load
// that changes every segment, and checks that its memory, goroutines and
// file descriptors stay flat and that it leaves nothing behind.
func faultSoak(r *runner) Fault {
	length := r.Scale(30 * time.Minute)
	f := Fault{Name: fmt.Sprintf("soak: %v of changing load", length), Expect: "RSS +≤ 20 %, goroutines +≤ 5, fds +≤ 3 from the first to the last third; no rule or set left after stop", Data: "n/a"}
	a, err := r.startAutonomic("soak")
	if err != nil {
		return failed(f, err)
	}
	stopped := false
	defer func() {
		if !stopped {
			a.Stop()
		}
	}()
	w0 := a.Warnings()
	seg := max(length/12, 5*time.Second)
	p := &lab.Phase{Name: "soak", Label: "soak", Length: length, From: 0, To: length, Jobs: []lab.Job{r.reader(length)}}
	writers := []int{12, 0, 3, 12, 6, 0, 12, 3, 6, 12, 0, 12}
	for i, at := 0, time.Duration(0); at+seg <= length; i, at = i+1, at+seg {
		for _, j := range r.writers(writers[i%len(writers)], at, seg) {
			j.Name = fmt.Sprintf("writer-%d", i)
			p.Jobs = append(p.Jobs, j)
		}
	}
	var samples []SoakSample
	var scrapeErr error
	every := max(length/30, 2*time.Second)
	for t := every; t < length; t += every {
		t := t
		p.Events = append(p.Events, lab.Event{At: t, Name: "scrape agent", Do: func() error {
			s, err := scrapeAgent("127.0.0.1:9311")
			if err != nil {
				scrapeErr = err
				return nil
			}
			s.T = t.Seconds()
			samples = append(samples, s)
			return nil
		}})
	}
	_, err = f.run(r, p)
	if err != nil {
		return failed(f, err)
	}
	if scrapeErr != nil || len(samples) < 6 {
		return failed(f, fmt.Errorf("%d samples; last scrape error: %v", len(samples), scrapeErr))
	}
	f.LogLines = a.Warnings() - w0
	alive := a.Alive()
	stopErr := a.Stop()
	stopped = true
	left, err := labelledObjects(labAgentLabel)
	if err != nil {
		return failed(f, err)
	}
	third := len(samples) / 3
	first, last := samples[:third], samples[len(samples)-third:]
	med := func(ss []SoakSample, g func(SoakSample) float64) float64 {
		var v []float64
		for _, s := range ss {
			v = append(v, g(s))
		}
		return report.Describe(v).P50
	}
	rss := func(s SoakSample) float64 { return s.RSSBytes }
	gor := func(s SoakSample) float64 { return s.Goroutines }
	fds := func(s SoakSample) float64 { return s.FDs }
	r0, r1 := med(first, rss), med(last, rss)
	g0, g1 := med(first, gor), med(last, gor)
	f0, f1 := med(first, fds), med(last, fds)
	f.Result = fmt.Sprintf("RSS %.1f → %.1f MiB, goroutines %.0f → %.0f, fds %.0f → %.0f (medians of first and last third, %d samples); %d objects left after stop",
		r0/(1<<20), r1/(1<<20), g0, g1, f0, f1, len(samples), len(left))
	f.Pass = alive && stopErr == nil && r1 <= 1.2*r0 && g1 <= g0+5 && f1 <= f0+3 && len(left) == 0
	if b, err := json.MarshalIndent(samples, "", " "); err == nil {
		os.WriteFile(filepath.Join(r.Dir, "soak-samples.json"), b, 0o644)
	}
	return f
}
