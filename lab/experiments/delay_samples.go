package experiments

import (
	"encoding/csv"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

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
	// out of the set or slowed in one direction only.
	rows [][]string
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
			m, err := a.List()
			if err != nil {
				return err
			}
			d, rd, wd, c := 0.0, 0.0, 0.0, 0.0
			for _, addr := range slices.SortedFunc(maps.Keys(m), netip.Addr.Compare) {
				s := m[addr]
				ds.rows = append(ds.rows, []string{fmt.Sprintf("%.1f", t.Seconds()), addr.String(),
					fmt.Sprintf("%.2f", float64(s.ReadDelay)/1e6), fmt.Sprintf("%.2f", float64(s.WriteDelay)/1e6)})
				d = math.Max(d, l.delay(s))
				rd, wd = math.Max(rd, float64(s.ReadDelay)/1e6), math.Max(wd, float64(s.WriteDelay)/1e6)
				c += float64(s.WriteRate) / 1e6
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

// writeCSV writes every consumer's delays per sample.
func (ds *delaySamples) writeCSV(path string) error {
	var b strings.Builder
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"t_s", "consumer", "read_delay_ms", "write_delay_ms"})
	_ = w.WriteAll(ds.rows)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
