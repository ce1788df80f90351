package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestExampleIsValid(t *testing.T) {
	c, err := Load("../examples/sanqos.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Interval != 100*time.Millisecond || c.Resources[0].Threshold != 15*time.Millisecond || c.PID.Ti != 200*time.Millisecond {
		t.Fatalf("example parsed wrong: %+v", c)
	}
}

// A resource takes the top-level objective unless it names its own.
func TestObjectiveInherited(t *testing.T) {
	c, err := Parse([]byte("objective: p95\nresources:\n  - name: a\n  - name: b\n    objective: mean\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Resources[0].Objective != "p95" || c.Resources[1].Objective != "mean" {
		t.Fatalf("objectives %q, %q", c.Resources[0].Objective, c.Resources[1].Objective)
	}
}

func TestEmptyIsDefaults(t *testing.T) {
	c, err := Parse([]byte("# nothing\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Backend != "auto" || c.Threshold != 15*time.Millisecond {
		t.Fatalf("%+v", c)
	}
}

// Unset, delay_follow ramps the delays by the sender's srtt where held
// packets are what its timers wait for (write_delay_on: acks), not where
// they are the target's own (replies), and never with a fixed ramp.
func TestDelayFollowDefault(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want bool
	}{
		{"", false},
		{"write_delay_on: replies\n", false},
		{"write_delay_on: acks\n", true},
		{"write_delay_on: acks\ndelay_follow: false\n", false},
		{"write_delay_on: replies\ndelay_follow: true\n", true},
	} {
		c, err := Parse([]byte(tc.yaml))
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if c.DelayFollow != tc.want {
			t.Errorf("%q: delay_follow %v, want %v", tc.yaml, c.DelayFollow, tc.want)
		}
	}
}

func TestErrorsNameFieldAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown field", "interval: 100ms\nthreshhold: 10ms\n", `line 2: unknown key "threshhold" (did you mean "threshold"?)`},
		{"bad backend", "backend: tc\n", "line 1: backend: tc: want auto"},
		{"max delay near RTO", "max_delay: 150ms\n", "line 1: max_delay"},
		{"refresh below interval", "discovery:\n  interval: 2s\n  refresh: 1s\n", "line 3: discovery.refresh"},
		{"delay rise negative", "delay_rise: -1ms\n", "line 1: delay_rise"},
		{"idle hold negative", "idle_hold: -1s\n", "line 1: idle_hold"},
		{"idle hold over an hour", "idle_hold: 2h\n", "line 1: idle_hold"},
		{"delay rise above max", "max_delay: 20ms\ndelay_rise: 30ms\n", "line 2: delay_rise"},
		{"write delay on", "write_delay_on: data\n", "line 1: write_delay_on: data: want replies (default) or acks"},
		{"delay_ramp is gone", "delay_ramp: 0.5\n", "line 1: delay_ramp: 0.5: was removed: delay_follow replaced it"},
		{"resource threshold", "resources:\n  - name: a\n  - name: b\n    threshold: -1ms\n", "line 4: resources[1].threshold"},
		{"bad consumer", "resources:\n  - name: a\n    important: [10.0.0.1, nope]\n", "line 3: resources[0].important[1]: nope: not an IP address"},
		{"duplicate", "resources:\n  - name: a\n  - name: a\n", "line 3: resources[1].name: a: the name of the resource on line 2 already"},
		{"kp", "pid:\n  kp: 0\n", "line 2: pid.kp"},
		{"static needs devices", "discovery:\n  source: static\nresources:\n  - name: a\n", "resources[0].devices"},
		{"not yaml", "interval: [\n", "line 1: not YAML: \"interval: [\": did not find expected node content"},
		{"wrong type", "interval: fast\n", "line 1"},
		{"objective", "objective: p99\n", "line 1: objective: p99: want mean|p95"},
		{"resource objective", "resources:\n  - name: a\n    objective: median\n", "line 3: resources[0].objective: median: want mean|p95"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want containing %q", tc.name, err, tc.want)
		}
	}
}

// Several errors are reported together, so one edit fixes them all.
func TestAllErrorsAtOnce(t *testing.T) {
	_, err := Parse([]byte("backend: x\nmode: y\newma_alpha: 2\n"))
	if err == nil || strings.Count(err.Error(), "\nline ")+1 != 3 || !strings.HasPrefix(err.Error(), "line 1:") {
		t.Fatalf("want three errors, got %v", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("interval: 100ms\nresources:\n  - name: a\n    devices: [loop0]\n"))
	f.Add([]byte("pid: {kp: 1, ti: 1s}\n"))
	f.Add([]byte("discovery:\n  interval: 20s\nmode: bridge\nmax_delay: -1ms\n"))
	f.Add([]byte("discovery: {source: static}\nresources:\n  - {policy: slo-classes, classes: [{}]}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err == nil && (c.MaxDelay >= 100*time.Millisecond || c.Interval <= 0) {
			t.Fatalf("accepted invalid config %+v", c)
		}
		// Every error of a file has its line (issue 52 item 7).
		var es Errors
		if errors.As(err, &es) {
			for _, e := range es {
				if e.Line <= 0 {
					t.Fatalf("no line: %v\n%q", e, b)
				}
			}
		}
	})
}

func TestSLOExampleIsValid(t *testing.T) {
	c, err := Load("../examples/slo-classes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Resources[0].Classes
	if len(cl) != 3 || cl[0].Name != "power" || cl[0].IOPS != 25 || cl[0].Latency != 1300*time.Microsecond || cl[2].Burst != 30*time.Second {
		t.Fatalf("example parsed wrong: %+v", cl)
	}
}

func TestPolicyErrors(t *testing.T) {
	res := "resources:\n  - name: a\n"
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown policy lists the valid ones", res + "    policy: fair\n", "line 3: resources[0].policy: fair: want read-over-write|important-sets|weighted|slo-classes"},
		{"weights need weighted", res + "    weights: {10.0.0.1: 2}\n", "line 3: resources[0].weights: weights apply to policy weighted only"},
		{"bad weight", res + "    policy: weighted\n    weights:\n      10.0.0.1: 0\n", "line 5: resources[0].weights.10.0.0.1: 0: want a weight > 0"},
		{"weight address", res + "    policy: weighted\n    weights:\n      nope: 1\n", "line 5: resources[0].weights.nope: not an IP address"},
		{"consumer_devices address", res + "    consumer_devices:\n      nope: [loop0]\n", "line 4: resources[0].consumer_devices.nope: not an IP address"},
		{"consumer_devices empty", res + "    consumer_devices:\n      10.0.0.1: []\n", "line 4: resources[0].consumer_devices.10.0.0.1: want at least one device"},
		{"consumer_devices outside the resource", res + "    devices: [loop0]\n    consumer_devices:\n      10.0.0.1: [loop0, loop7]\n", "line 5: resources[0].consumer_devices.10.0.0.1[1]: loop7: not one of the resource's devices (loop0)"},
		{"slo needs classes", res + "    policy: slo-classes\n", "line 3: resources[0].policy: slo-classes: policy slo-classes needs at least one class"},
		{"classes need slo", res + "    classes:\n      - name: x\n        members: [10.0.0.1]\n", "line 3: resources[0].classes: classes apply"},
		{"member twice", res + "    policy: slo-classes\n    classes:\n      - name: x\n        members: [10.0.0.1]\n      - name: y\n        members: [10.0.0.1]\n",
			"line 8: resources[0].classes[1].members[0]: 10.0.0.1: already in class x"},
		{"negative objective", res + "    policy: slo-classes\n    classes:\n      - name: x\n        members: [10.0.0.1]\n        iops: -1\n", "line 7: resources[0].classes[0].iops"},
		{"burst without floor", res + "    policy: slo-classes\n    classes:\n      - name: x\n        members: [10.0.0.1]\n        latency: 2ms\n        burst: 5s\n",
			"line 8: resources[0].classes[0].burst: 5s: a burst allowance needs"},
		{"duplicate class", res + "    policy: slo-classes\n    classes:\n      - name: x\n        members: [10.0.0.1]\n      - name: x\n        members: [10.0.0.2]\n",
			"line 7: resources[0].classes[1].name: x: the name of the class on line 5 already"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want containing %q", tc.name, err, tc.want)
		}
	}
	// Default priorities follow the list, first highest.
	c, err := Parse([]byte(res + "    policy: slo-classes\n    classes:\n      - name: x\n        members: [10.0.0.1]\n      - name: y\n        members: [10.0.0.2]\n"))
	if err != nil || c.Resources[0].Classes[0].Priority != 2 || c.Resources[0].Classes[1].Priority != 1 {
		t.Fatalf("default priorities: %v %+v", err, c)
	}
}

// Bridge mode names resources by portal and needs a capture interface;
// its settings are refused in target mode rather than ignored.
func TestBridgeMode(t *testing.T) {
	c, err := Parse([]byte("mode: bridge\ncapture_interface: p-bm\nresources:\n  - name: r0\n    portals: [10.99.0.1:3260, 10.99.0.9]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.CaptureInterface != "p-bm" || len(c.Resources[0].Portals) != 2 {
		t.Fatalf("%+v", c)
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"no interface", "mode: bridge\nresources:\n  - name: a\n    portals: [10.0.0.1]\n", "line 1: capture_interface: not set (mode is bridge on line 1): mode bridge needs"},
		{"no portals", "mode: bridge\ncapture_interface: p-bm\nresources:\n  - name: a\n", "line 4: resources[0].portals"},
		{"bad portal", "mode: bridge\ncapture_interface: p-bm\nresources:\n  - name: a\n    portals:\n      - 10.0.0.1:3260\n      - target\n", "line 7: resources[0].portals[1]: target: want address:port or address"},
		{"shared portal", "mode: bridge\ncapture_interface: p-bm\nresources:\n  - name: a\n    portals: [10.0.0.1]\n  - name: b\n    portals: [10.0.0.1:3260]\n", "line 7: resources[1].portals[0]: 10.0.0.1:3260: portal 10.0.0.1:3260 is already resource a's"},
		{"devices", "mode: bridge\ncapture_interface: p-bm\nresources:\n  - name: a\n    devices: [sdb]\n    portals: [10.0.0.1]\n", "line 5: resources[0].devices: mode bridge has no block devices"},
		{"portals in target mode", "resources:\n  - name: a\n    portals: [10.0.0.1]\n", "line 3: resources[0].portals: portals apply to mode bridge only"},
		{"bad protocol", "mode: bridge\ncapture_interface: p-bm\nresources:\n  - name: a\n    portals: [10.0.0.1]\n    protocol: nvme\n", "line 6: resources[0].protocol: nvme: want iscsi|nvme-tcp"},
		{"protocol in target mode", "resources:\n  - name: a\n    protocol: nvme-tcp\n", "line 3: resources[0].protocol: nvme-tcp: protocol applies to mode bridge only"},
		{"nvme-tcp portal's port", "mode: bridge\ncapture_interface: p-bm\nresources:\n  - name: a\n    portals: [10.0.0.1:4420]\n  - name: b\n    portals: [10.0.0.1]\n    protocol: nvme-tcp\n", "line 7: resources[1].portals[0]: 10.0.0.1: portal 10.0.0.1:4420 is already resource a's"},
		{"interface in target mode", "capture_interface: eth0\n", "line 1: capture_interface: eth0: applies to mode bridge only"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want containing %q", tc.name, err, tc.want)
		}
	}
}

func TestBridgeExampleIsValid(t *testing.T) {
	c, err := Load("../examples/bridge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != "bridge" || c.CaptureInterface != "eth1" || c.Resources[0].Portals[0] != "192.168.10.5:3260" {
		t.Fatalf("example parsed wrong: %+v", c)
	}
}

// What yaml.v3 and the range checks said was no help (issue 32 item 6):
// each of these says what is wrong, at which key and line, and what
// would be right.
func TestErrorsSayWhatIsAllowed(t *testing.T) {
	res := "resources:\n  - name: vg1\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string // each must be in the error
	}{
		{"threshold 0", "threshold: 0ms\n" + res, []string{"line 1: threshold: 0ms: want more than 0 and at most 10s", "e.g. 15ms"}},
		{"threshold too long", "threshold: 11s\n" + res, []string{"line 1: threshold: 11s: want more than 0 and at most 10s"}},
		{"resource threshold 0", res + "    threshold: 0ms\n", []string{"line 3: resources[0].threshold: 0ms: want more than 0", "leave it out"}},
		{"bare number", "threshold: 15\n" + res, []string{"line 1: threshold: 15 is a bare number: want a duration with a unit, e.g. 15ms"}},
		{"bare float", "interval: 0.1\n" + res, []string{"line 1: interval: 0.1 is a bare number: want a duration with a unit"}},
		{"quoted bare number", "threshold: \"15\"\n" + res, []string{`line 1: threshold: "15": want a duration with a unit, e.g. 15ms`}},
		{"nested bare number", "pid:\n  ti: 200\n" + res, []string{"line 2: pid.ti: 200 is a bare number"}},
		{"resource bare number", res + "    threshold: 10\n", []string{"line 3: resources[0].threshold: 10 is a bare number"}},
		{"class bare number", res + "    policy: slo-classes\n    classes:\n      - name: x\n        members: [10.0.0.1]\n        latency: 2\n",
			[]string{"line 7: resources[0].classes[0].latency: 2 is a bare number"}},
		{"unknown key", "treshold: 10ms\n" + res, []string{`line 1: unknown key "treshold" (did you mean "threshold"?)`}},
		{"unknown key case", "Threshold: 10ms\n" + res, []string{`(did you mean "threshold"?)`}},
		{"unknown discovery key", "discovery:\n  sorce: lio\n" + res, []string{`line 2: discovery: unknown key "sorce" (did you mean "source"?)`}},
		{"unknown pid key", "pid:\n  kd: 1\n" + res, []string{`line 2: pid: unknown key "kd" (did you mean "kp"?)`}},
		{"unknown resource key", res + "    treshold: 10ms\n", []string{`line 3: resources[0]: unknown key "treshold" (did you mean "threshold"?)`}},
		{"unknown class key", res + "    policy: slo-classes\n    classes:\n      - name: x\n        member: [10.0.0.1]\n",
			[]string{`line 6: resources[0].classes[0]: unknown key "member" (did you mean "members"?)`}},
		{"key in the wrong block", "kp: 1\n" + res, []string{`line 1: unknown key "kp" here: it is a key of pid:`}},
		{"resource key at the top", "devices: [sdb]\n" + res, []string{`unknown key "devices" here (did you mean "device"? "devices" is a key of each resources: entry)`}},
		{"nothing near", "pid:\n  gain: 1\n" + res, []string{`line 2: pid: unknown key "gain" (want kp, ti, td)`}},
		{"wrong kind", "iscsi_port: abc\n" + res, []string{`line 1: iscsi_port: "abc": want a whole number`}},
		{"list wanted", res + "    devices: sdb\n", []string{"line 3: resources[0].devices: sdb: want a list"}},
		{"every problem", "treshold: 10ms\ninterval: 1\n" + res, []string{`line 1: unknown key "treshold"`, "line 2: interval: 1 is a bare number"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "config.") || strings.Contains(err.Error(), "unmarshal") {
				t.Errorf("Go's type names leak: %q", err)
			}
		})
	}
}

// An alias used many times is checked once, not once per use.
func TestDecodeErrorsAliasesOnce(t *testing.T) {
	_, err := Parse([]byte("x: &r {name: a, treshold: 1ms}\nresources: [*r, *r, *r]\n"))
	if err == nil || strings.Count(err.Error(), "treshold") != 1 || !strings.Contains(err.Error(), `unknown key "x"`) {
		t.Fatalf("%v", err)
	}
}

// A config without resources is valid (a cluster member can get them
// from the policy) but warns that it protects nothing.
func TestNoResourcesWarns(t *testing.T) {
	for _, doc := range []string{"", "# nothing\n", "threshold: 10ms\n"} {
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if c.NoResources() == nil || len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "protect nothing") {
			t.Errorf("%q: %v, warnings %q", doc, c.NoResources(), c.Warnings)
		}
	}
	c, err := Parse([]byte("resources:\n  - name: a\n"))
	if err != nil || c.NoResources() != nil || len(c.Warnings) != 0 {
		t.Fatalf("%v %v %q", err, c.NoResources(), c.Warnings)
	}
}
