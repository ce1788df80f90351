package doctor

import (
	"encoding/csv"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/sanqos/sanqos/sample"
)

var labDevices = []string{"loop0", "loop1", "loop2", "loop3"}

// recordedDiskstats turns a lab trace (lab/experiments/testdata: per
// device per 100 ms tick, reads, read wait and MB/s) back into the
// cumulative /proc/diskstats counters the agent sampled.
func recordedDiskstats(t *testing.T, path string) []map[string]sample.Counters {
	t.Helper()
	zr := testenv.Gunzip(t, path)
	r := csv.NewReader(zr)
	if _, err := r.Read(); err != nil {
		t.Fatal(err)
	}
	cum := map[string]sample.Counters{}
	var out []map[string]sample.Counters
	var last string
	t0 := time.Unix(1e9, 0)
	flush := func() {
		snap := map[string]sample.Counters{}
		for _, d := range labDevices {
			c := cum[d]
			c.Device, c.Time = d, t0.Add(time.Duration(len(out)+1)*100*time.Millisecond)
			snap[d] = c
		}
		out = append(out, snap)
	}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if last != "" && rec[2] != last {
			flush()
		}
		last = rec[2]
		num := func(i int) float64 { v, _ := strconv.ParseFloat(rec[i], 64); return v }
		c := cum[rec[4]]
		n := uint64(num(5))
		c.Reads += n
		c.ReadTicks += uint64(float64(n)*num(7) + 0.5)
		c.ReadSectors += uint64(num(9) * 1e6 * 0.1 / 512)
		c.Writes += uint64(num(6))
		c.WriteSectors += uint64(num(10) * 1e6 * 0.1 / 512)
		cum[rec[4]] = c
	}
	flush()
	return out
}

// doctor's figures on recorded lab runs (agent off): the floor, the wait
// at the busiest, and the suggestion; a window without load, or without
// a quiet moment, suggests nothing and says why.
func TestMeasureRecorded(t *testing.T) {
	const lab = "../lab/experiments/testdata/"
	backup := recordedDiskstats(t, lab+"read-backup-run/trace.csv.gz")
	for _, tc := range []struct {
		name                      string
		series                    []map[string]sample.Counters
		floor, busiest, suggestMs float64
		line                      string
	}{
		// 12 sequential readers: 30.3 MB/s at their peak.
		{"read-backup", backup, 6.33, 27.01, 27.0, "suggested threshold 27.0 ms"},
		// ten random 8 KiB streams: 3.7 MB/s.
		{"mixed", recordedDiskstats(t, lab+"mixed-run/trace.csv.gz"), 6.33, 65.76, 65.8, "suggested threshold 65.8 ms"},
		// one level of throughput throughout: idle and loaded cannot
		// be told apart.
		{"reader alone", backup[:50], 0, 6.39, 0, "floor unknown: no quiet interval"},
		{"always loaded", backup[60:110], 0, 26.76, 0, "floor unknown: no quiet interval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Measure(tc.series, labDevices, 0.95)
			t.Logf("%+v", m)
			near := func(got, want float64) bool {
				return want == 0 && got == 0 || want != 0 && got > want*0.97 && got < want*1.03
			}
			if !near(m.FloorMs, tc.floor) || !near(m.BusiestMs, tc.busiest) || m.SuggestMs != tc.suggestMs {
				t.Errorf("floor %.2f busiest %.2f suggest %.1f, want %.2f %.2f %.1f", m.FloorMs, m.BusiestMs, m.SuggestMs, tc.floor, tc.busiest, tc.suggestMs)
			}
			if l := strings.Join(m.Lines(), "\n"); !strings.Contains(l, tc.line) {
				t.Errorf("lines lack %q:\n%s", tc.line, l)
			}
		})
	}
}

// The check maps the config's resources to their devices (static
// discovery here), samples them over the window at the config's
// interval through the injected sampler, and reports per resource.
func TestThresholdCheck(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sanqos.yaml")
	if err := os.WriteFile(cfg, []byte("discovery: {source: static}\nresources:\n  - name: vg1\n    devices: [loop0, loop1, loop2, loop3]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	series := recordedDiskstats(t, "../lab/experiments/testdata/read-backup-run/trace.csv.gz")
	e := NewEnv(Host{Root: dir}, cfg)
	if e.ConfigErr != nil {
		t.Fatal(e.ConfigErr)
	}
	e.Window = 40 * time.Second
	var asked []string
	var askedN int
	e.Disk = func(devices []string, every time.Duration, n int) ([]map[string]sample.Counters, error) {
		if every != config.Defaults().Interval {
			t.Errorf("sampled every %v, want the config's interval", every)
		}
		asked, askedN = devices, n
		return series[:n+1], nil
	}
	checks := Checks(e)
	if c := checks[len(checks)-1]; c.Name != "threshold" {
		t.Fatalf("last check %s, want threshold", c.Name)
	}
	r := e.thresholdCheck()
	if strings.Join(asked, " ") != "loop0 loop1 loop2 loop3" || askedN != 400 {
		t.Errorf("sampled %v × %d, want the four devices × 400", asked, askedN)
	}
	if r.Status != OK || !strings.Contains(r.Summary, "vg1 floor 6.3 ms, busiest 27.0 ms, suggest 27.0 ms") || !strings.Contains(strings.Join(r.Detail, "\n"), "suggested threshold 27.0 ms") {
		t.Errorf("%v: %s\n%s", r.Status, r.Summary, strings.Join(r.Detail, "\n"))
	}
	if cs := Checks(NewEnv(Host{Root: dir}, cfg)); cs[len(cs)-1].Name == "threshold" {
		t.Error("threshold check registered without --window")
	}
}
