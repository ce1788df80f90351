package experiments

import (
	"math"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// traceReplay serves a recorded phase to the agent as its samplers: each
// LUN's diskstats counters accumulated from the trace's intervals, and
// each initiator's write rate (what TCP_INFO reports) from its LUN's.
type traceReplay struct {
	res   *lab.PhaseResult
	i     int // the tick served
	epoch time.Time
	cum   map[string]sample.Counters
}

func (r *traceReplay) advance() bool {
	if r.i >= len(r.res.Ticks) {
		return false
	}
	tk := r.res.Ticks[r.i]
	for h, iv := range tk.Dev {
		dev := "loop" + string(rune('0'+slices.Index(lab.Hosts, h)))
		c := r.cum[dev]
		c.Device = dev
		c.Time = r.epoch.Add(time.Duration(tk.T * float64(time.Second)))
		c.Reads += iv.Reads
		c.Writes += iv.Writes
		c.InFlight = iv.InFlight
		if iv.Reads > 0 && !math.IsNaN(iv.ReadWaitMs) {
			c.ReadTicks += uint64(math.Round(iv.ReadWaitMs * float64(iv.Reads)))
		}
		if iv.Writes > 0 && !math.IsNaN(iv.WriteWaitMs) {
			c.WriteTicks += uint64(math.Round(iv.WriteWaitMs * float64(iv.Writes)))
		}
		// A loaded trace keeps rates, not durations: a tick is 100 ms.
		c.ReadSectors += uint64(math.Round(iv.ReadBps * 0.1 / 512))
		c.WriteSectors += uint64(math.Round(iv.WriteBps * 0.1 / 512))
		r.cum[dev] = c
	}
	r.i++
	return true
}

func (r *traceReplay) Read(devices ...string) (map[string]sample.Counters, error) {
	out := make(map[string]sample.Counters, len(r.cum))
	for d, c := range r.cum {
		out[d] = c
	}
	return out, nil
}

// Sample reports each host's bytes on the wire as its LUN's, not exactly:
// the wire and diskstats are read at slightly different moments and a
// request's bytes cross one after the other, so the wire's tick is
// taken as half this tick's device bytes and half the last's, plus
// iSCSI's 48-byte header per 8 KiB. Its commands are what the sampler
// would count from its segments (sample.commands at an MSS of 1448): a
// read's command segment less its 48/1448, a write's last segment's
// empty fraction.
func (r *traceReplay) Sample() (map[netip.Addr]sample.Rate, error) {
	out := map[netip.Addr]sample.Rate{}
	tk := r.res.Ticks[r.i-1]
	prev := tk
	if r.i > 1 {
		prev = r.res.Ticks[r.i-2]
	}
	for h, iv := range tk.Dev {
		p := prev.Dev[h]
		out[lab.HostAddr(h)] = sample.Rate{WriteBps: 1.006 * (iv.WriteBps + p.WriteBps) / 2, ReadBps: 1.006 * (iv.ReadBps + p.ReadBps) / 2, Conns: 1,
			CommandsPerSec: (wireCommands(iv) + wireCommands(p)) / 2}
	}
	return out, nil
}

// wireCommands is the sampler's command count per second for one
// device interval's requests (see Sample).
func wireCommands(iv sample.Interval) float64 {
	const mss, hdr, tick = 1448.0, 48.0, 0.1 // a loaded trace's tick: 100 ms
	n := float64(iv.Reads) * (1 - hdr/mss)
	if iv.Writes > 0 {
		b := hdr + iv.WriteBps*tick/float64(iv.Writes)
		n += float64(iv.Writes) * (math.Ceil(b/mss) - b/mss)
	}
	return n / tick
}

// The write-cap lever's hand-over, on a real run: the 10 ms phase of
// `lab run autonomic --agent-set 'backend: delayline+htb', max_delay
// 20ms, rate_lever_steps 20` (scale 0.25, results/autonomic/lever-final1;
// trace cut to that phase), replayed through the agent's own loop with
// the run's config. The wait it recorded is the one that sent the real
// agent past the delay's ceiling, so the replayed controller walks there
// too. Throughout: a writer is capped only while its delay is at the
// maximum (the delay falls only after the caps are gone), a cap tightens
// by at most capRamp per tick, and the reader is never slowed.
func TestRateLeverHandOverOnRecordedRun(t *testing.T) {
	const maxDelay = 20 * time.Millisecond
	reader := lab.HostAddr("b2")
	last := map[netip.Addr]uint64{}
	var cappedTicks, delayTicks, ticks int
	replayAgent(t, replay{fixture: "testdata/lever-run", phase: "threshold-10ms", wire: true,
		cfg: "backend: dry-run\nthreshold: 10ms\nmax_delay: 20ms\nrate_lever_steps: 20\nobjective: p95\nresources:\n  - name: vg1\n"},
		func(t *testing.T, at float64, set map[netip.Addr]throttle.Setting, _ agent.ResourceStatus) {
			ticks++
			if s, ok := set[reader]; ok {
				t.Fatalf("t=%.1f s: the reader is slowed: %+v", at, s)
			}
			for c, s := range set {
				if s.WriteDelay > 0 {
					delayTicks++
				}
				if s.WriteRate == 0 {
					continue
				}
				cappedTicks++
				if s.WriteDelay != maxDelay {
					t.Errorf("t=%.1f s: %v capped at %d B/s with a delay of %v, below the maximum", at, c, s.WriteRate, s.WriteDelay)
				}
				if p, ok := last[c]; ok && float64(s.WriteRate) < 0.7*float64(p)-1 {
					t.Errorf("t=%.1f s: %v's cap fell from %d to %d B/s in one tick", at, c, p, s.WriteRate)
				}
			}
			clear(last)
			for c, s := range set {
				if s.WriteRate > 0 {
					last[c] = s.WriteRate
				}
			}
		})
	t.Logf("%d ticks: %d consumer-ticks delayed, %d capped", ticks, delayTicks, cappedTicks)
	if cappedTicks == 0 {
		t.Fatal("the replay never reached the write caps")
	}
}
