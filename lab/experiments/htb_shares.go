package experiments

import (
	"bufio"
	"fmt"
	"math"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/throttle"
)

// htbShares: Per-consumer HTB rate caps changed at run time (seed 001).
func init() {
	register(&Experiment{Name: "htb-shares", DefaultScale: 1,
		Title: "Per-consumer HTB rate caps on sequential readers, changed at run time: cap error and the longest stall at a change (seed 001)", Run: runHTBShares})
}

// ShareCap is one capped reader in one segment.
type ShareCap struct {
	Host   string  `json:"host"`
	CapMBs float64 `json:"cap_mb_s"`
	// WireMBs is what the consumer's HTB class sent (tc class statistics:
	// IP packets, headers included), the quantity HTB shapes.
	WireMBs float64 `json:"wire_mb_s"`
	// PayloadMBs is the reader's LUN read rate (diskstats).
	PayloadMBs  float64 `json:"payload_mb_s"`
	WireErrPct  float64 `json:"wire_error_pct"`
	PayloadPct  float64 `json:"payload_vs_cap_pct"`
	MinTickMBs  float64 `json:"min_100ms_payload_mb_s"`
	SegmentFrom float64 `json:"from_s"`
}

// SharesSummary is summary.json of htb-shares.
type SharesSummary struct {
	Experiment string     `json:"experiment"`
	Caps       []ShareCap `json:"caps"`
	// MaxWireErrPct is the largest |wire error| over all caps.
	MaxWireErrPct float64 `json:"max_wire_error_pct"`
	// LongestStallMs is the longest run of 100 ms intervals, right after
	// a cap change, in which a capped reader moved nothing.
	LongestStallMs float64         `json:"longest_stall_ms_at_change"`
	TCP            lab.TCPCounters `json:"tcp"`
}

// htbClassBytes reads the bytes each HTB class of the target's eth0 has
// sent, by class minor.
func htbClassBytes() (map[uint16]uint64, error) {
	out, err := lab.InNS(lab.TargetNS, "tc", "-s", "class", "show", "dev", "eth0")
	if err != nil {
		return nil, err
	}
	got := map[uint16]uint64{}
	var minor uint16
	var have bool
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) > 2 && f[0] == "class" && f[1] == "htb":
			_, m, ok := strings.Cut(f[2], ":")
			v, err := strconv.ParseUint(m, 16, 16)
			minor, have = uint16(v), ok && err == nil
		case len(f) > 2 && f[0] == "Sent" && have:
			if v, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				got[minor] = v
			}
			have = false
		}
	}
	return got, nil
}

// runHTBShares caps three of four sequential readers, changes the caps
// after a third of the run and lifts them after two thirds. Caps are set
// one consumer at a time at first, so the class minors are known (the
// backend hands them out from 0x10 in order).
func runHTBShares(r *runner) (any, error) {
	a, err := lab.StartAgent("htb", r.Dir)
	if err != nil {
		return nil, err
	}
	defer a.Stop()
	seg := r.Scale(10 * time.Second)
	capped := []string{"b3", "b4", "b5"}
	caps := [][]float64{{2, 4, 6}, {6, 2, 4}} // MB/s per segment
	set := func(i int) error {
		for k, h := range capped {
			if err := a.Set(map[netip.Addr]throttle.Setting{lab.HostAddr(h): {Rate: uint64(caps[i][k] * 1e6)}}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := set(0); err != nil {
		return nil, err
	}
	length := 3 * seg
	p := &lab.Phase{Name: "shares", Label: "HTB caps 2/4/6, then 6/2/4, then none", Length: length, From: 0, To: length}
	for _, h := range lab.Hosts {
		p.Jobs = append(p.Jobs, lab.Job{Name: "seqread", Host: h, URL: r.LUN(h).URL, RW: "read", BS: 64 << 10, NumJobs: 2, Runtime: length})
	}
	var snaps []map[uint16]uint64
	var snapAt []time.Duration
	snap := func(at time.Duration) lab.Event {
		return lab.Event{At: at, Name: "class bytes", Do: func() error {
			b, err := htbClassBytes()
			snaps, snapAt = append(snaps, b), append(snapAt, at)
			return err
		}}
	}
	skip := time.Second // settle after each change
	p.Events = []lab.Event{snap(skip), snap(seg), {At: seg, Name: "change caps", Do: func() error { return set(1) }},
		snap(seg + skip), snap(2 * seg), {At: 2 * seg, Name: "lift caps", Do: func() error { return a.Clear() }}}
	res, err := r.Run(p, 0)
	if err != nil {
		return nil, err
	}
	sum := sharesSummary(res, capped, caps, snaps, snapAt, seg)
	var series []report.Series
	for _, h := range lab.Hosts {
		x, y := res.Series(h, readMBs)
		series = append(series, report.Series{Name: fmt.Sprintf("%s (%v)", h, lab.HostAddr(h)), X: x, Y: report.Smooth(y)})
	}
	return sum, report.TimePlot(filepath.Join(r.Dir, "rates.png"), "htb-shares: per-reader read rate under caps 2/4/6, 6/2/4, none", "time (s)", "MB/s (EWMA 0.15)", series, nil)
}

// sharesSummary reads the run: per segment and capped host (classes
// 0x10 on, in capped's order), the wire rate its class's byte counters
// (snaps, taken at snapAt) give and the payload rate its device saw,
// against its cap; then the longest stall right after the change at seg.
func sharesSummary(res *lab.PhaseResult, capped []string, caps [][]float64, snaps []map[uint16]uint64, snapAt []time.Duration, seg time.Duration) SharesSummary {
	sum := SharesSummary{Experiment: "htb-shares", TCP: res.TCP}
	for i := range caps {
		from, to := snapAt[2*i], snapAt[2*i+1]
		secs := (to - from).Seconds()
		for k, h := range capped {
			minor := uint16(0x10 + k)
			wire := float64(snaps[2*i+1][minor]-snaps[2*i][minor]) / secs / 1e6
			pay := report.Values(res.Between(from, to), h, readMBs)
			d := report.Describe(pay)
			lo := math.NaN()
			if len(pay) > 0 {
				lo = slices.Min(pay)
			}
			c := caps[i][k]
			sc := ShareCap{Host: h, CapMBs: c, WireMBs: report.Round(wire, 3), PayloadMBs: report.Round(d.Mean, 3),
				WireErrPct: report.Round(100*(wire-c)/c, 2), PayloadPct: report.Round(100*(d.Mean-c)/c, 2), MinTickMBs: report.Round(lo, 3), SegmentFrom: from.Seconds()}
			sum.Caps = append(sum.Caps, sc)
			sum.MaxWireErrPct = math.Max(sum.MaxWireErrPct, math.Abs(sc.WireErrPct))
		}
	}
	// Stalls right after the change: consecutive idle intervals of a
	// capped reader within a second of it.
	for _, h := range capped {
		run := 0
		for _, t := range res.Between(seg, seg+time.Second) {
			if iv, ok := t.Dev[h]; ok && iv.ReadBps == 0 {
				run++
				sum.LongestStallMs = math.Max(sum.LongestStallMs, float64(run)*100)
			} else {
				run = 0
			}
		}
	}
	return sum
}
