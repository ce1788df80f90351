package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyRun copies a testdata run into a temp dir, since Generate writes
// next to the run's files.
func copyRun(t *testing.T, name string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("testdata", name, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// TestGenerate renders each recorded run's report.html: its regenerated
// figures, tables and scalars, self-contained, and the same again. It is
// long for its table of runs; the checks are one loop.
func TestGenerate(t *testing.T) {
	// Experiments declare their plots (lab/experiments); these runs' here.
	RegisterPlots("autonomic", WaitVsThresholdPlot)
	RegisterPlots("delay-sweep", RateVsDelayPlot)
	t.Cleanup(func() { delete(plotsOf, "autonomic"); delete(plotsOf, "delay-sweep") })
	for _, tc := range []struct {
		run       string
		plots     []string // regenerated figures that must exist
		contains  []string // in report.html
		notExists []string
	}{
		{
			// A lab run (autonomic, trace thinned to every 2 s).
			run:   "autonomic",
			plots: []string{"report-wait-vs-threshold.png", "report-trace-read-wait.png", "report-trace-write-rate.png"},
			contains: []string{
				"<td>agent_cpu_pct</td><td>12.33</td>",            // a scalar
				"<td>baseline.read_wait_ms.p95</td><td>47.5</td>", // nested, dotted
				"<h2>regulated</h2>", "<th>read_wait_ms.p95</th>", // array of objects as a table
				"<td>15</td><td>1800</td><td>13.87</td>",               // its row, in the summary's order
				"data:image/png;base64,", "report-trace-read-wait.png", // embedded figures
				"<td>trace.csv</td>",
			},
		},
		{
			// delay-sweep --backends: one series per backend and
			// direction in the rate-vs-delay figure, runs as a table.
			run:      "delay-sweep-backends",
			plots:    []string{"report-rate-vs-delay.png"},
			contains: []string{"<h2>runs</h2>", "<td>edt</td>", "<td>netem</td>", "report-rate-vs-delay.png"},
		},
		{
			// Any summary renders: unknown experiment, no trace.
			run: "other",
			contains: []string{
				"<td>seed</td><td>42</td>", "<td>ok</td><td>true</td>", "<td>missing</td><td>–</td>",
				"<td>model.alpha</td><td>0.5</td>", "<td>tags</td><td>x, y</td>",
				"<h2>per_resource</h2>", "<th>extra</th>", "<td>0, 0.5, 1</td>",
				"(not named in summary.json)",
			},
			notExists: []string{"report-trace-read-wait.png"},
		},
	} {
		t.Run(tc.run, func(t *testing.T) {
			dir := copyRun(t, tc.run)
			out, err := Generate(dir)
			if err != nil {
				t.Fatal(err)
			}
			html, err := os.ReadFile(out)
			if err != nil || filepath.Base(out) != "report.html" {
				t.Fatalf("%s: %v", out, err)
			}
			for _, p := range tc.plots {
				b, err := os.ReadFile(filepath.Join(dir, p))
				if err != nil || !bytes.HasPrefix(b, pngMagic) {
					t.Errorf("%s: not a PNG (%v)", p, err)
				}
			}
			if n := strings.Count(string(html), "data:image/png;base64,"); n != len(tc.plots) {
				t.Errorf("%d embedded figures, want %d", n, len(tc.plots))
			}
			for _, s := range tc.contains {
				if !strings.Contains(string(html), s) {
					t.Errorf("report lacks %q", s)
				}
			}
			for _, p := range tc.notExists {
				if _, err := os.Stat(filepath.Join(dir, p)); err == nil {
					t.Errorf("%s written", p)
				}
			}
			if strings.Contains(string(html), "http://") || strings.Contains(string(html), "https://") {
				t.Error("report must be self-contained (no external URLs)")
			}
			// Regenerating is idempotent (the report does not list itself).
			if _, err := Generate(dir); err != nil {
				t.Fatal(err)
			}
			again, _ := os.ReadFile(out)
			if strings.Count(string(again), "data:image/png") != strings.Count(string(html), "data:image/png") {
				t.Error("second run changed the figures")
			}
		})
	}
}

func TestGenerateErrors(t *testing.T) {
	for _, tc := range []struct{ name, summary, trace, want string }{
		{"no run", "", "", "no run here"},
		{"not an object", `[1,2]`, "", "not a JSON object"},
		{"bad json", `{"a":`, "", "summary.json"},
		// A foreign trace is reported in the page, not fatal.
		{"foreign trace", `{"experiment":"x"}`, "a,b\n1,2\n", ""},
	} {
		dir := t.TempDir()
		if tc.summary != "" {
			os.WriteFile(filepath.Join(dir, "summary.json"), []byte(tc.summary), 0o644)
		}
		if tc.trace != "" {
			os.WriteFile(filepath.Join(dir, "trace.csv"), []byte(tc.trace), 0o644)
		}
		out, err := Generate(dir)
		if tc.want == "" {
			b, _ := os.ReadFile(out)
			if err != nil || !strings.Contains(string(b), "not a lab trace") {
				t.Errorf("%s: %v (note shown: %v)", tc.name, err, strings.Contains(string(b), "not a lab trace"))
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
