package experiments

import (
	"slices"
	"strings"
	"testing"
)

// The registry holds the experiments `lab run` has always known, by the
// same names, each once, with a one-line title and a scale RunExperiment
// accepts.
func TestRegistry(t *testing.T) {
	want := []string{"autonomic", "bridge-autonomic", "cluster-autonomic", "delay-steps-read", "delay-steps-write",
		"delay-sweep", "delay-sweep-fresh", "equal-share", "htb-shares", "htb-steps", "idle-reader", "important-sets", "interference",
		"mixed", "overhead", "overhead-interleaved", "pid", "read-backup", "reliability", "reservations", "slo-classes",
		"throttle-effect", "weighted"}
	var got []string
	for _, e := range All() {
		s := e
		got = append(got, s.Name)
		if s.Title == "" || strings.Contains(s.Title, "\n") {
			t.Errorf("%s: title %q, want one line", s.Name, s.Title)
		}
		if s.DefaultScale < 0.01 || s.DefaultScale > 10 {
			t.Errorf("%s: default scale %v", s.Name, s.DefaultScale)
		}
		if l, err := Lookup(s.Name); err != nil || l.Name != s.Name {
			t.Errorf("Lookup(%q) = %v, %v", s.Name, l, err)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("registered %v,\nwant %v", got, want)
	}
	if got, want := Taking(flagBackends), "autonomic, delay-sweep, delay-sweep-fresh, mixed, overhead, pid, read-backup, throttle-effect"; got != want {
		t.Errorf("--backends taken by %s, want %s", got, want)
	}
	if _, err := Lookup("no-such"); err == nil || !strings.Contains(err.Error(), "have: autonomic, ") {
		t.Errorf("Lookup(no-such): %v", err)
	}
}
