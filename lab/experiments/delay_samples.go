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
}

// delaySampler samples the agent's throttles as phase events (the agent
// is the source of truth for what it applied): the delay acting is the
// write delay for writers, the larger of read and write delay for
// interferers that read.
func delaySampler(a *lab.LabAgent, length time.Duration, l *interferers, ds *delaySamples) []lab.Event {
	var ev []lab.Event
	for t := time.Second; t < length; t += 500 * time.Millisecond {
		t := t
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
		run.Throttled = round(100*float64(on)/float64(inWin), 1)
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
