package labcli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/lab/experiments"
)

// `lab run --help` lists every experiment of the registry, each with its
// one-line title: the list experiments.Help makes, which a test-only
// experiment shows up in (lab/experiments, TestOneFileExperiment).
func TestLabRunHelpListsEveryExperiment(t *testing.T) {
	out, err := run(t, "lab", "run", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range experiments.All() {
		s := e
		if !strings.Contains(out, s.Name) || !strings.Contains(strings.Join(strings.Fields(out), " "), s.Title) {
			t.Errorf("lab run --help does not list %s: %q", s.Name, s.Title)
		}
	}
	if len(experiments.All()) < 20 {
		t.Errorf("only %d experiments registered", len(experiments.All()))
	}
}

// A guest lab that went away (QEMU gone, its directory left) makes lab
// run fail and say so, instead of running on the host's lab. The
// experiment's name is unknown, so a wrong turn to the host's lab could
// not run anything either.
func TestLabRunRefusesADeadGuest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "guest")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "guest.json"), []byte(`{"pid": 999999999}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SANQOS_GUEST_DIR", dir)
	_, err := run(t, "lab", "run", "no-such-experiment")
	if err == nil || !strings.Contains(err.Error(), "lab down") || strings.Contains(err.Error(), "unknown experiment") {
		t.Errorf("lab run with a dead guest: %v", err)
	}
	_, err = run(t, "lab", "run", "no-such-experiment", "--kernel", "debian")
	if err == nil || !strings.Contains(err.Error(), "lab up --kernel debian") {
		t.Errorf("lab run --kernel debian with a dead guest: %v", err)
	}
	_, err = run(t, "lab", "run", "no-such-experiment", "--kernel", "host")
	if err == nil || !strings.Contains(err.Error(), "unknown experiment") {
		t.Errorf("lab run --kernel host: %v", err)
	}
}
