package experiments

import (
	"encoding/csv"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// delaySamples are the agent's throttles sampled every 500 ms: at x (s),
// the largest delay acting on the interferers (ms), the largest read and
// write delay on anyone (ms), the larger of the two on the protected
// reader b2 itself (ms), and the sum of the write-rate caps of the second
// lever (MB/s, 0 with none).
type delaySamples struct {
	x, delay, read, write, reader, caps []float64
	// rows are every consumer's delays per sample, for delays-*.csv:
	// the plot shows only the largest, which hides a consumer left
	// out of the set or slowed in one direction only; with the target's
	// srtt to each (ConsumerStatus.SendSRTTMs), to see whether a delay
	// outran the target's tail-loss probe timer (about 2 × srtt).
	rows [][]string
	// loop are each resource's controller state per sample, for
	// loop-*.csv: the setpoint is threshold / the tail factor, so a run
	// that held the wait tighter than asked shows whether the tail
	// factor or the controller put it there.
	loop [][]string
	// auto are the first resource's threshold and threshold: auto's
	// status per sample (nil: a set threshold).
	auto []autoSample
	// onsets are the first resource's surges as the agent met them.
	onsets []agent.OnsetStatus
}

// onsetQueue is the run's queue (nil: not logged) with the agent's first
// action on each surge, for the onsets' floor.
func (ds *delaySamples) onsetQueue(res *lab.PhaseResult) *report.OnsetQueue {
	if res.Queue == nil {
		return nil
	}
	q := &report.OnsetQueue{Queue: *res.Queue}
	for _, o := range ds.onsets {
		q.Note(o.ActedAt.Sub(res.Start).Seconds(), o.BacklogMs)
	}
	return q
}

// autoSample is one status sample of threshold: auto.
type autoSample struct {
	x, thrMs float64
	st       *agent.AutoThresholdStatus
}

// delaySampler samples the agent's throttles as phase events (the agent
// is the source of truth for what it applied): the delay acting is the
// write delay for writers, the larger of read and write delay for
// interferers that read.
func delaySampler(a *lab.LabAgent, length time.Duration, l *interferers, ds *delaySamples) []lab.Event {
	var ev []lab.Event
	for t := time.Second; t < length; t += 500 * time.Millisecond {
		ev = append(ev, lab.Event{At: t, Name: "sample delay", Do: func() error {
			// One status: the throttles and the controllers' state
			// of the same instant, in one request.
			var st agent.Status
			if err := a.Status(&st); err != nil {
				return err
			}
			m, err := st.ThrottlesByAddr()
			if err != nil {
				return err
			}
			srtt := map[string]float64{} // by consumer, as status names them
			for _, r := range st.Resources {
				for _, c := range r.Consumers {
					srtt[c.Addr] = c.SendSRTTMs
				}
			}
			d, rd, wd, c := 0.0, 0.0, 0.0, 0.0
			for _, addr := range slices.SortedFunc(maps.Keys(m), netip.Addr.Compare) {
				s := m[addr]
				ds.rows = append(ds.rows, []string{fmt.Sprintf("%.1f", t.Seconds()), addr.String(),
					fmt.Sprintf("%.2f", float64(s.ReadDelay)/1e6), fmt.Sprintf("%.2f", float64(s.WriteDelay)/1e6),
					fmt.Sprintf("%.2f", srtt[addr.String()])})
				d = math.Max(d, l.delay(s))
				rd, wd = math.Max(rd, float64(s.ReadDelay)/1e6), math.Max(wd, float64(s.WriteDelay)/1e6)
				c += float64(s.WriteRate) / 1e6
			}
			if len(st.Resources) > 0 {
				if o := st.Resources[0].LastOnset; o != nil && !o.ActedAt.IsZero() {
					ds.onsets = append(ds.onsets, *o)
				}
			}
			if len(st.Resources) > 0 && st.Resources[0].Auto != nil {
				r := st.Resources[0]
				ds.auto = append(ds.auto, autoSample{t.Seconds(), r.ThresholdMs, r.Auto})
			}
			for _, r := range st.Resources {
				ds.loop = append(ds.loop, []string{fmt.Sprintf("%.1f", t.Seconds()), r.Name, msCell(r.SetpointMs), msCell(r.IndicatorMs),
					msCell(r.RawWaitMs), msCell(float64(r.Delay) / 1e6)})
			}
			b2 := m[lab.HostAddr("b2")]
			ds.x = append(ds.x, t.Seconds())
			ds.delay, ds.read, ds.write = append(ds.delay, d), append(ds.read, rd), append(ds.write, wd)
			ds.reader = append(ds.reader, float64(max(b2.ReadDelay, b2.WriteDelay))/1e6)
			ds.caps = append(ds.caps, c)
			return nil
		}})
	}
	return ev
}

// series is a run's curves in delay.png: the write delay for writers;
// for interferers that read, the read delay and, if any was set, the
// write delay, so the plot shows which direction acted, and the delay on
// the protected reader if it had one: the reader's wait in read-wait.png
// is measured at the disk, and cannot show a delay on its own packets.
func (ds *delaySamples) series(label string, l *interferers) []report.Series {
	if !l.reads {
		return []report.Series{{Name: label, X: ds.x, Y: ds.delay}}
	}
	out := []report.Series{{Name: label + ", read delay", X: ds.x, Y: ds.read}}
	if slices.ContainsFunc(ds.write, func(d float64) bool { return d > 0 }) {
		out = append(out, report.Series{Name: label + ", write delay", X: ds.x, Y: ds.write})
	}
	if slices.ContainsFunc(ds.reader, func(d float64) bool { return d > 0 }) {
		out = append(out, report.Series{Name: label + ", on the reader b2", X: ds.x, Y: ds.reader})
	}
	return out
}

// throttled sets run's MaxDelay and, over p's window, the share of
// samples with a delay applied.
func (ds *delaySamples) throttled(run *ControlledRun, p *lab.Phase) {
	var on, inWin int
	for i, d := range ds.delay {
		run.MaxDelay = math.Max(run.MaxDelay, d)
		if x := ds.x[i]; x > p.From.Seconds() && x <= p.To.Seconds() {
			inWin++
			if d > 0 {
				on++
			}
		}
	}
	if inWin > 0 {
		run.Throttled = report.Round(100*float64(on)/float64(inWin), 1)
	}
}

// msCell formats a status value in ms; NaN (no reads this tick) as empty.
func msCell(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	return fmt.Sprintf("%.2f", v)
}

// writeCSVs writes every consumer's delays per sample to
// delays-NAME.csv and each resource's controller state to loop-NAME.csv.
func (ds *delaySamples) writeCSVs(dir, name string) error {
	if err := writeCSV(filepath.Join(dir, "delays-"+name+".csv"), []string{"t_s", "consumer", "read_delay_ms", "write_delay_ms", "send_srtt_ms"}, ds.rows); err != nil {
		return err
	}
	return writeCSV(filepath.Join(dir, "loop-"+name+".csv"), []string{"t_s", "resource", "setpoint_ms", "indicator_ms", "raw_wait_ms", "delay_ms"}, ds.loop)
}

func writeCSV(path string, header []string, rows [][]string) error {
	var b strings.Builder
	w := csv.NewWriter(&b)
	_ = w.Write(header)
	_ = w.WriteAll(rows)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// autoThreshold is threshold: auto's run as the samples saw it: the
// threshold chosen at the end, when it was first learned, the range held
// since, and the reader's p95 over p's window from then on against the
// choice. nil samples (no status with threshold_auto) read as learning
// at the config's start.
func (ds *delaySamples) autoThreshold(res *lab.PhaseResult, p *lab.Phase) *report.AutoThresholdRun {
	out := &report.AutoThresholdRun{State: "learning", StartMs: float64(config.AutoStart) / 1e6, ChosenMs: float64(config.AutoStart) / 1e6}
	if len(ds.auto) == 0 {
		return out
	}
	out.StartMs = ds.auto[0].thrMs
	prev := ds.auto[0].thrMs
	for _, s := range ds.auto {
		if s.thrMs != prev {
			out.Changes++
			prev = s.thrMs
		}
		if s.st.State != "learned" {
			continue
		}
		if out.LearnedAtS == 0 {
			out.LearnedAtS, out.MinMs, out.MaxMs = s.x, s.thrMs, s.thrMs
		}
		out.MinMs, out.MaxMs = math.Min(out.MinMs, s.thrMs), math.Max(out.MaxMs, s.thrMs)
	}
	last := ds.auto[len(ds.auto)-1]
	out.State, out.ChosenMs, out.FloorMs = last.st.State, last.thrMs, report.Round(last.st.FloorMs, 2)
	out.PeakMBs, out.WaitAtPeakMs = report.Round(last.st.PeakMBs, 2), report.Round(last.st.WaitAtPeakMs, 2)
	if out.LearnedAtS > 0 {
		from := max(p.From, time.Duration(out.LearnedAtS*float64(time.Second)))
		if w := report.Values(res.Between(from, p.To), "b2", readWait); len(w) > 0 {
			out.ReaderP95SinceLearnedMs = report.Round(report.Describe(w).P95, 2)
			out.P95XChosen = report.Round(out.ReaderP95SinceLearnedMs/out.ChosenMs, 2)
		}
	}
	return out
}
