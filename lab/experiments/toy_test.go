package experiments

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// toy is a test-only experiment, whole in this file: what adding one to
// `sanqos-lab lab run` takes (docs/experiments.md, "Adding an experiment"). Its one
// phase is planned, not run, so the test needs no lab.
var toy = &Experiment{Name: "toy", DefaultScale: 0.05, Title: "a test-only experiment: one 20 s phase (× scale), planned and summarized", Run: runToy}

// ToySummary is toy's summary.json.
type ToySummary struct {
	Experiment string  `json:"experiment"`
	Scale      float64 `json:"scale"`
	PhaseS     float64 `json:"phase_s"`
}

func runToy(r *runner) (any, error) {
	p := &lab.Phase{Name: "toy", Label: "toy", Length: r.Scale(20 * time.Second)}
	return ToySummary{Experiment: "toy", Scale: r.opts.Scale, PhaseS: p.Length.Seconds()}, nil
}

// An experiment added as one file that registers it shows up in `lab
// run --help` (Help, which the command prints: TestLabRunHelpListsEveryExperiment
// in cmd/sanqos) and runs through the shared runner: its default scale
// filled in, its summary.json and report.html written.
func TestOneFileExperiment(t *testing.T) {
	saved := registry
	t.Cleanup(func() { registry = saved })
	register(toy) // what the file's init does

	if want := "  toy                a test-only experiment: one 20 s phase (× scale), planned and summarized\n"; !strings.Contains(Help(), want) {
		t.Errorf("lab run --help lists\n%s\nwant a line %q", Help(), want)
	}
	e, err := Lookup("toy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkOptions(e, Options{Backends: []string{"edt"}}); err == nil || !strings.Contains(err.Error(), "toy takes no --backends") {
		t.Errorf("--backends for toy: %v", err)
	}
	o, err := checkOptions(e, Options{RunOptions: lab.RunOptions{Repeat: 1}})
	if err != nil || o.Scale != 0.05 {
		t.Fatalf("options %+v, %v: want toy's default scale 0.05", o.RunOptions, err)
	}
	r := lab.PlanRunner(nil, nil, o.RunOptions)
	r.Dir = t.TempDir()
	if err := runOn(e, r, o); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(r.Dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum ToySummary
	if err := json.Unmarshal(b, &sum); err != nil || sum != (ToySummary{Experiment: "toy", Scale: 0.05, PhaseS: 1}) {
		t.Errorf("summary.json %s (%v): want toy's, its 20 s phase at scale 0.05", b, err)
	}
	if _, err := os.Stat(filepath.Join(r.Dir, "report.html")); err != nil {
		t.Errorf("no report: %v", err)
	}
}
