package config

import (
	"strings"
	"testing"
	"time"
)

// threshold: auto, at the top level or per resource: the resource is
// flagged and starts from AutoStart; a resource's own duration wins over
// the top level's auto, and its own auto over the top level's duration.
func TestThresholdAuto(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		top        bool
		auto       []bool
		thr        []time.Duration
	}{
		{"top level", "threshold: auto\nresources:\n  - name: a\n  - name: b\n    threshold: 10ms\n",
			true, []bool{true, false}, []time.Duration{AutoStart, 10 * time.Millisecond}},
		{"one resource", "threshold: 20ms\nresources:\n  - name: a\n    threshold: auto\n  - name: b\n",
			false, []bool{true, false}, []time.Duration{AutoStart, 20 * time.Millisecond}},
		{"quoted", "threshold: \"auto\"\nresources:\n  - {name: a}\n", true, []bool{true}, []time.Duration{AutoStart}},
		{"anchored", "resources:\n  - &r {name: a, threshold: auto}\n", false, []bool{true}, []time.Duration{AutoStart}},
		{"none", "resources:\n  - name: a\n", false, []bool{false}, []time.Duration{15 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if c.ThresholdAuto != tc.top {
				t.Errorf("top-level auto %v, want %v", c.ThresholdAuto, tc.top)
			}
			for i, r := range c.Resources {
				if r.ThresholdAuto != tc.auto[i] || r.Threshold != tc.thr[i] {
					t.Errorf("resource %s: auto %v threshold %v, want %v %v", r.Name, r.ThresholdAuto, r.Threshold, tc.auto[i], tc.thr[i])
				}
			}
		})
	}
}

// auto is the only word a threshold takes, errors keep their lines when
// another key is bad beside an auto, and bridge mode refuses it.
func TestThresholdAutoErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"other word", "threshold: automatic\n", `line 1: threshold: "automatic": want a duration`},
		{"bad key beside auto", "threshold: auto\ninterval: 5\n", "line 2: interval: 5 is a bare number"},
		{"bridge", "mode: bridge\ncapture_interface: eth1\nthreshold: auto\nresources:\n  - name: a\n    portals: [10.0.0.1]\n",
			"resources[0].threshold: auto learns from the devices' diskstats"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
