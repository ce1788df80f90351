package experiments

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// overheadInterleaved: Idle throttle rules toggled within one transfer (thesis §5.8, precise).
func init() {
	register(&Experiment{Name: "overhead-interleaved", DefaultScale: 0.25,
		Title: "Idle throttle rules taken out and put back every 2 s within one transfer, paired t (§5.8, precise)", Run: runOverheadInterleavedOnly})
}

// InterleavedDirection is one direction of the interleaved overhead
// measurement: one long transfer during which the agent's idle rules are
// taken out and put back every window, compared pair by pair.
type InterleavedDirection struct {
	// OverheadPct is the geometric mean over pairs of (rate without rules
	// / rate with idle rules) − 1, in %: the extra time to move the same
	// data. The CI is a paired t on the log ratios, mapped back.
	OverheadPct  float64    `json:"overhead_pct"`
	CI99Pct      [2]float64 `json:"ci99_pct"`
	P            float64    `json:"p"`
	Pairs        int        `json:"pairs"`
	WindowS      float64    `json:"window_s"`
	BaseMBs      float64    `json:"base_mb_s"`
	IdleRulesMBs float64    `json:"idle_rules_mb_s"`
	// TargetTxPktsPerS is what the target sent per second in the measured
	// windows (eth0 tx_packets: GSO packets, as netfilter sees them).
	// Times the per-packet cost of the idle rules (the throttle package's
	// BenchmarkIdleRules) it bounds their CPU cost at this load.
	TargetTxPktsPerS float64   `json:"target_tx_packets_per_s"`
	PairPct          []float64 `json:"pair_pct"`
}

// ruleToggle takes a label's iptables rules out of their chains and puts
// them back at the same positions, each as one atomic iptables-restore
// --noflush per family, so a window never sees half the rules.
type ruleToggle struct {
	ns       string
	off, on  [2]string // restore input per family (iptables, ip6tables)
	nonEmpty bool
}

var restoreCmds = [2][2]string{{"iptables-save", "iptables-restore"}, {"ip6tables-save", "ip6tables-restore"}}

// newRuleToggle snapshots the rules carrying label in namespace ns.
func newRuleToggle(ns, label string) (*ruleToggle, error) {
	t := &ruleToggle{ns: ns}
	for fam, c := range restoreCmds {
		out, err := lab.InNS(ns, c[0])
		if err != nil {
			if fam == 1 {
				continue // no IPv6 tables: nothing of ours there either
			}
			return nil, err
		}
		t.off[fam], t.on[fam] = toggleScripts(out, label)
		if t.off[fam] != "" {
			t.nonEmpty = true
		}
	}
	if !t.nonEmpty {
		return nil, fmt.Errorf("no iptables rule with comment %q in %s", label, ns)
	}
	return t, nil
}

// toggleScripts turns iptables-save output into the restore input that
// deletes the label's rules and the one that reinserts them at their
// original positions (ascending, so each lands where it was).
func toggleScripts(save, label string) (off, on string) {
	var offB, onB strings.Builder
	var table string
	var dels, ins []string
	pos := map[string]int{}
	flush := func() {
		if len(dels) > 0 {
			fmt.Fprintf(&offB, "*%s\n%s\nCOMMIT\n", table, strings.Join(dels, "\n"))
			fmt.Fprintf(&onB, "*%s\n%s\nCOMMIT\n", table, strings.Join(ins, "\n"))
		}
		dels, ins, pos = nil, nil, map[string]int{}
	}
	sc := bufio.NewScanner(strings.NewReader(save))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case line == "COMMIT":
			flush()
		case strings.HasPrefix(line, "-A "):
			f := strings.SplitN(line, " ", 3)
			if len(f) < 3 {
				continue
			}
			pos[f[1]]++
			if hasComment(line, label) {
				dels = append(dels, "-D "+f[1]+" "+f[2])
				ins = append(ins, fmt.Sprintf("-I %s %d %s", f[1], pos[f[1]], f[2]))
			}
		}
	}
	return offB.String(), onB.String()
}

func hasComment(line, label string) bool {
	return strings.Contains(line, "--comment "+label+" ") || strings.HasSuffix(line, "--comment "+label) ||
		strings.Contains(line, `--comment "`+label+`"`)
}

func (t *ruleToggle) set(on bool) error {
	for fam, c := range restoreCmds {
		in := t.off[fam]
		if on {
			in = t.on[fam]
		}
		if in == "" {
			continue
		}
		cmd := exec.Command("ip", "netns", "exec", t.ns, c[1], "--noflush")
		cmd.Stdin = strings.NewReader(in)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s in %s: %v: %s", c[1], t.ns, err, strings.TrimSpace(errb.String()))
		}
	}
	return nil
}

// ifaceBytes reads an interface's byte counters (both directions) and
// transmitted packets inside a namespace over netlink: no fork at the
// instant that bounds a window.
type ifaceBytes struct {
	h    *netlink.Handle
	name string
}

func newIfaceBytes(ns, name string) (*ifaceBytes, error) {
	nh, err := netns.GetFromName(ns)
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", ns, err)
	}
	defer nh.Close()
	h, err := netlink.NewHandleAt(nh)
	if err != nil {
		return nil, err
	}
	return &ifaceBytes{h: h, name: name}, nil
}

type ifaceCount struct {
	bytes, txPkts uint64
	at            time.Time
}

func (b *ifaceBytes) read() (ifaceCount, error) {
	l, err := b.h.LinkByName(b.name)
	if err != nil {
		return ifaceCount{}, err
	}
	now := time.Now()
	s := l.Attrs().Statistics
	if s == nil {
		return ifaceCount{}, fmt.Errorf("%s: no statistics", b.name)
	}
	return ifaceCount{bytes: s.TxBytes + s.RxBytes, txPkts: s.TxPackets, at: now}, nil
}

func (b *ifaceBytes) Close() { b.h.Close() }

// runOverheadInterleaved moves data over the RAM LUN for length while the
// idle rules of a running agent are out for one window and in for the
// next. Windows come in pairs whose order alternates (off/on, on/off, …)
// so a trend favours neither side; the first guard of every window (TCP
// and the queue settling after the change) is not counted. Each pair
// gives one overhead figure; the CI is a paired t over pairs.
//
// Setting up the windows' events stays here, as the experiment's script
// read in the order it runs; the pairs' analysis is interleavedResult's.
func runOverheadInterleaved(r *runner, dir string, length, window time.Duration) (InterleavedDirection, *lab.PhaseResult, error) {
	var out InterleavedDirection
	// --no-reinstall: the agent would put the rules back within a tick
	// of each window that takes them out.
	a, err := r.startAgent("delayline", "--no-reinstall")
	if err != nil {
		return out, nil, err
	}
	defer a.Stop()
	// StartAgent labels its objects sanqos-lab-agent; the delay line adds -dl.
	tog, err := newRuleToggle(lab.TargetNS, "sanqos-lab-agent-dl")
	if err != nil {
		return out, nil, err
	}
	ctr, err := newIfaceBytes(lab.TargetNS, "eth0")
	if err != nil {
		return out, nil, err
	}
	defer ctr.Close()

	const guard = 300 * time.Millisecond
	lead := 2 * time.Second // session login and the first I/Os
	n := int((length-lead)/window) / 2 * 2
	if n < 4 {
		return out, nil, fmt.Errorf("interleaved overhead: %v holds fewer than two pairs of %v windows", length, window)
	}
	// Pair i is windows 2i and 2i+1: off then on for even i, on then off
	// for odd i.
	onAt := func(k int) bool { return (k/2)%2 != k%2 }
	rates := make([]float64, n)
	var start ifaceCount
	var pkts uint64
	var measured time.Duration
	var measErr error
	note := func(err error) {
		if err != nil && measErr == nil {
			measErr = err
		}
	}
	lun := r.State.RAM.LUNs[0]
	p := &lab.Phase{Name: "interleaved-" + dir, Label: "RAM LUN " + dir + ", idle rules in/out", Length: length + time.Minute, From: 0, To: length,
		Jobs: []lab.Job{{Name: "move", Host: "b2", URL: lun.URL, RW: dir, BS: 64 << 10, Runtime: length + time.Second}}}
	for k := 0; k <= n; k++ {
		at := lead + time.Duration(k)*window
		p.Events = append(p.Events, lab.Event{At: at, Name: fmt.Sprintf("window %d", k), Do: func() error {
			if k > 0 {
				c, err := ctr.read()
				note(err)
				if el := c.at.Sub(start.at); err == nil && el > 0 {
					rates[k-1] = float64(c.bytes-start.bytes) / el.Seconds() / 1e6
					pkts += c.txPkts - start.txPkts
					measured += el
				}
			}
			if k < n {
				return tog.set(onAt(k))
			}
			return tog.set(true) // the agent owns its rules again
		}})
		if k < n {
			p.Events = append(p.Events, lab.Event{At: at + guard, Name: fmt.Sprintf("window %d measured", k), Do: func() error {
				var err error
				start, err = ctr.read()
				note(err)
				return nil
			}})
		}
	}
	res, err := r.Run(p, 0)
	if err != nil {
		_ = tog.set(true)
		return out, res, err
	}
	if measErr != nil {
		return out, res, measErr
	}
	out, err = interleavedResult(rates, onAt, window, pkts, measured)
	return out, res, err
}

// interleavedResult is the overhead of the idle rules from the windows'
// rates (MB/s; window k had the rules in if onAt(k)), pair by pair, and
// the target's packet rate from the pkts it sent over measured.
func interleavedResult(rates []float64, onAt func(int) bool, window time.Duration, pkts uint64, measured time.Duration) (InterleavedDirection, error) {
	n := len(rates)
	var diffs, base, idle []float64
	for i := 0; i+1 < n; i += 2 {
		var off, on float64
		if onAt(i) {
			on, off = rates[i], rates[i+1]
		} else {
			off, on = rates[i], rates[i+1]
		}
		if off <= 0 || on <= 0 {
			return InterleavedDirection{}, fmt.Errorf("interleaved overhead: window pair %d moved nothing (%.2f / %.2f MB/s)", i/2, off, on)
		}
		// Log ratios: a pair's ratio is symmetric in its two windows, and
		// a mean of logs is not dragged by one stalled window the way a
		// mean of percentages is.
		diffs = append(diffs, math.Log(off/on))
		base, idle = append(base, off), append(idle, on)
	}
	w := report.PairedT(diffs, 0.99)
	mb, _ := report.MeanStderr(base)
	mi, _ := report.MeanStderr(idle)
	pct := func(l float64) float64 { return report.Round((math.Exp(l)-1)*100, 3) }
	out := InterleavedDirection{OverheadPct: pct(w.Diff), CI99Pct: [2]float64{pct(w.CI[0]), pct(w.CI[1])}, P: report.Round(w.P, 4),
		Pairs: len(diffs), WindowS: window.Seconds(), BaseMBs: report.Round(mb, 2), IdleRulesMBs: report.Round(mi, 2),
		TargetTxPktsPerS: report.Round(float64(pkts)/measured.Seconds(), 0)}
	for _, d := range diffs {
		out.PairPct = append(out.PairPct, pct(d))
	}
	return out, nil
}

// OverheadInterleavedSummary is summary.json of overhead-interleaved.
type OverheadInterleavedSummary struct {
	Experiment string               `json:"experiment"`
	Backend    string               `json:"backend"`
	Read       InterleavedDirection `json:"read"`
	Write      InterleavedDirection `json:"write"`
	runTCP
}

func runOverheadInterleavedOnly(r *runner) (any, error) {
	if r.State.RAM == nil {
		return nil, errNoRAM
	}
	il, res, err := runInterleavedBoth(r)
	if err != nil {
		return nil, err
	}
	sum := OverheadInterleavedSummary{Experiment: "overhead-interleaved", Backend: "delayline", Read: il["read"], Write: il["write"]}
	sum.runTCP = tcpOf(res)
	return sum, nil
}

// runInterleavedBoth measures reads then writes: 2 s windows over 8
// minutes each at scale 1 (at least one minute).
func runInterleavedBoth(r *runner) (map[string]InterleavedDirection, []*lab.PhaseResult, error) {
	out := map[string]InterleavedDirection{}
	var all []*lab.PhaseResult
	for _, dir := range []string{"read", "write"} {
		d, res, err := runOverheadInterleaved(r, dir, max(r.Scale(480*time.Second), 60*time.Second), 2*time.Second)
		if res != nil {
			all = append(all, res)
		}
		if err != nil {
			return out, all, err
		}
		out[dir] = d
	}
	return out, all, nil
}
