package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// parseErr is Parse's whole error for doc, one line per problem.
func parseErr(t *testing.T, doc string) string {
	t.Helper()
	_, err := Parse([]byte(doc))
	if err == nil {
		t.Fatalf("accepted:\n%s", doc)
	}
	return err.Error()
}

// Every error names its line and key and echoes the value as the file
// writes it; one the file leaves out says so, and names the key it does
// set that makes the default wrong (issue 52 item 7). Each row is one bad
// input and the whole error it gets, every line of it.
func TestErrorsExact(t *testing.T) {
	res := "resources:\n  - name: vg1\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string // the error's lines, all of them, in order
	}{
		{"interval too short", "interval: 5ms\n", []string{"line 1: interval: 5ms: want 10ms..10s"}},
		{"interval too long", "interval: 1m\n", []string{"line 1: interval: 1m: want 10ms..10s"}},
		{"backend", "backend: tc\n", []string{"line 1: backend: tc: want auto|edt|netem|delayline|htb|delayline+htb|edt+htb|dry-run"}},
		{"mode", "mode: router\n", []string{"line 1: mode: router: want target (OUTPUT chain) or bridge (FORWARD chain)"}},
		{"iscsi_port", "iscsi_port: 70000\n", []string{"line 1: iscsi_port: 70000: want 1..65535"}},
		// ports is checked as a whole: each item at its line.
		{"ports", "ports:\n  - 3260\n  - 70000\n  - 3260\n", []string{"line 3: ports[1]: 70000: want 1..65535", "line 4: ports[2]: 3260: listed twice"}},
		{"ports empty", "ports: []\n", []string{"line 1: ports: want at least one port"}},
		{"ports too many", "ports: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]\n", []string{"line 1: ports: 16 ports: want at most 15 (iptables' multiport match)"}},
		{"ports and iscsi_port", "iscsi_port: 3260\nports: [4420]\n", []string{"line 2: ports: set ports or iscsi_port, not both (iscsi_port: 3260 is ports: [3260])"}},
		{"socket", "socket: run/s.sock\n", []string{"line 1: socket: run/s.sock: want an absolute path"}},
		{"http", "http: localhost\n", []string{"line 1: http: localhost: want host:port (e.g. 127.0.0.1:9311), or empty to disable"}},
		{"ewma_alpha", "ewma_alpha: 1.5\n", []string{"line 1: ewma_alpha: 1.5: want 0 < alpha <= 1"}},
		{"pid.kp", "pid:\n  kp: 0\n", []string{"line 2: pid.kp: 0: want > 0"}},
		{"pid.ti", "pid:\n  kp: 1\n  ti: -1s\n", []string{"line 3: pid.ti: -1s: want > 0 (integral time)"}},
		{"delay_step", "delay_step: 50ms\n", []string{"line 1: delay_step: 50ms: want 100us..10ms"}},
		{"max_delay", "max_delay: 150ms\n", []string{"line 1: max_delay: 150ms: want delay_step..<100ms (TCP's minimum RTO is 200 ms)"}},
		{"max_delay below delay_step", "delay_step: 5ms\nmax_delay: 2ms\n", []string{"line 2: max_delay: 2ms: want delay_step..<100ms (TCP's minimum RTO is 200 ms)"}},
		// delay_rise (0 by default) was reported against a negative
		// max_delay, with no line: it is not in the file.
		{"negative max_delay alone", "max_delay: -1ms\n", []string{"line 1: max_delay: -1ms: want delay_step..<100ms (TCP's minimum RTO is 200 ms)"}},
		{"delay_rise above max_delay", "max_delay: 20ms\ndelay_rise: 30ms\n", []string{"line 2: delay_rise: 30ms: want 0 (no bound)..max_delay; below 2ms to avoid tail-loss probes"}},
		{"idle_hold", "idle_hold: 2h\n", []string{"line 1: idle_hold: 2h: want 0 (release with the policy)..1h"}},
		{"throttleable_queue", "throttleable_queue: 5000\n", []string{"line 1: throttleable_queue: 5000: want 0 (off) or a queue of up to 1024 requests, e.g. 1.5"}},
		{"threshold", "threshold: 11s\n", []string{"line 1: threshold: 11s: want more than 0 and at most 10s (the response time important reads are held under; e.g. 15ms)"}},
		{"discovery.source", "discovery:\n  source: scst\n", []string{"line 2: discovery.source: scst: want auto|tgt|lio|nvmet|iet|static"}},
		// A default made wrong by a key the file sets: the error is at
		// that key's line and names it.
		{"refresh's default below interval", "discovery:\n  interval: 20s\n",
			[]string{"line 2: discovery.refresh: 10s (default; discovery.interval is 20s on line 2): want discovery.interval..10m"}},
		{"refresh below interval", "discovery:\n  interval: 2s\n  refresh: 1s\n", []string{"line 3: discovery.refresh: 1s: want discovery.interval..10m"}},
		{"static discovery, devices left out", "discovery:\n  source: static\n" + res,
			[]string{"line 4: resources[0].devices: [auto] (default; discovery.source is static on line 2): static discovery needs explicit devices"}},
		{"bridge without capture_interface", "mode: bridge\n" + res + "    portals: [10.0.0.1]\n",
			[]string{"line 1: capture_interface: not set (mode is bridge on line 1): mode bridge needs the interface towards the target (e.g. the bridge port), ≤ 15 characters"}},
		{"bridge resource without portals", "mode: bridge\ncapture_interface: p-bm\n" + res,
			[]string{"line 4: resources[0].portals: not set (mode is bridge on line 1): mode bridge names a resource by its target's portals (address:port)"}},
		{"resource without a name", "resources:\n  - devices: [sdb]\n", []string{"line 2: resources[0].name: not set: want a non-empty name without spaces, quotes or slashes (≤ 64)"}},
		{"resource name with a space", "resources:\n  - name: vg 1\n", []string{`line 2: resources[0].name: "vg 1": want a non-empty name without spaces, quotes or slashes (≤ 64)`}},
		{"resource name twice", res + "  - name: vg1\n", []string{"line 3: resources[1].name: vg1: the name of the resource on line 2 already"}},
		{"device", res + "    devices: [sdb, /dev/sdc]\n", []string{"line 3: resources[0].devices[1]: /dev/sdc: want a diskstats device name (e.g. loop3, sdb) or auto"}},
		{"important address", res + "    important: [10.0.0.1, 10.0.0.300]\n", []string{"line 3: resources[0].important[1]: 10.0.0.300: not an IP address"}},
		{"throttleable address", res + "    throttleable:\n      - host-a\n", []string{"line 4: resources[0].throttleable[0]: host-a: not an IP address"}},
		{"resource objective", res + "    objective: p99\n", []string{"line 3: resources[0].objective: p99: want mean|p95"}},
		// An invalid top-level objective is not reported again for every
		// resource that inherits it.
		{"top-level objective once", "objective: p99\n" + res + "  - name: vg2\n", []string{"line 1: objective: p99: want mean|p95"}},
		{"top-level threshold once", "threshold: 0ms\n" + res, []string{"line 1: threshold: 0ms: want more than 0 and at most 10s (the response time important reads are held under; e.g. 15ms)"}},
		{"policy", res + "    policy: fair\n", []string{"line 3: resources[0].policy: fair: want read-over-write|important-sets|weighted|slo-classes|reservations"}},
		{"weight", res + "    policy: weighted\n    weights:\n      10.0.0.1: -2\n", []string{"line 5: resources[0].weights.10.0.0.1: -2: want a weight > 0 (≤ 1e6)"}},
		{"weight's address", res + "    policy: weighted\n    weights:\n      db1: 2\n", []string{"line 5: resources[0].weights.db1: not an IP address"}},
		{"class member", res + "    policy: slo-classes\n    classes:\n      - name: gold\n        members: [10.0.0.1, 10.0.0.1]\n",
			[]string{"line 6: resources[0].classes[0].members[1]: 10.0.0.1: already in class gold"}},
		{"class latency", res + "    policy: slo-classes\n    classes:\n      - name: gold\n        members: [10.0.0.1]\n        latency: 20s\n",
			[]string{"line 7: resources[0].classes[0].latency: 20s: want 0 (none) .. 10s"}},
		{"portal", "mode: bridge\ncapture_interface: p-bm\n" + res + "    portals: [10.0.0.1:0]\n",
			[]string{"line 5: resources[0].portals[0]: 10.0.0.1:0: want a port other than 0"}},
		{"reservation period", res + "    policy: reservations\n    reservations:\n      - consumer: 10.0.0.1\n        bytes: 1000000\n        period: 2m\n",
			[]string{"line 7: resources[0].reservations[0].period: 2m: want 500ms..1m0s"}},
		// A key set twice: yaml.v3 said "mapping key already defined",
		// naming neither the key's block nor, without a file, the file.
		{"key twice", "threshold: 10ms\nthreshold: 20ms\n", []string{"line 2: threshold: set twice: also on line 1 (delete one)"}},
		{"resource key twice", res + "    threshold: 10ms\n    threshold: 20ms\n", []string{"line 4: resources[0].threshold: set twice: also on line 3 (delete one)"}},
		{"weight twice", res + "    policy: weighted\n    weights:\n      10.0.0.1: 2\n      10.0.0.1: 3\n", []string{"line 6: resources[0].weights.10.0.0.1: set twice: also on line 5 (delete one)"}},
		// In line order, whatever order the checks run in; what does not
		// decode and what does not validate together.
		{"line order", res + "    threshold: 0ms\nbackend: x\ninterval: 1ms\npid:\n  kp: -1\n", []string{
			"line 3: resources[0].threshold: 0ms: want more than 0 and at most 10s (the response time important reads are held under; leave it out for the top-level threshold)",
			"line 4: backend: x: want auto|edt|netem|delayline|htb|delayline+htb|edt+htb|dry-run",
			"line 5: interval: 1ms: want 10ms..10s",
			"line 7: pid.kp: -1: want > 0",
		}},
		{"decoding and validation", "interval: fast\nbackend: x\ntreshold: 10ms\n" + res + "    threshold: 99s\n", []string{
			`line 1: interval: "fast": want a duration with a unit, e.g. 15ms`,
			"line 2: backend: x: want auto|edt|netem|delayline|htb|delayline+htb|edt+htb|dry-run",
			`line 3: unknown key "treshold" (did you mean "threshold"?)`,
			"line 6: resources[0].threshold: 99s: want more than 0 and at most 10s (the response time important reads are held under; leave it out for the top-level threshold)",
		}},
		// A value that does not decode is not validated as the default
		// it left in place; the line's other errors are reported.
		{"not decoded, not validated", "discovery:\n  source: static\n" + res + "    devices: sdb\n",
			[]string{"line 5: resources[0].devices: sdb: want a list, e.g. [a, b]"}},
		{"a block wanted", "pid: 5\n", []string{"line 1: pid: 5: want a block of key: value"}},
		{"one line, two errors", "resources: [{name: a, threshold: 0ms, treshold: 1ms}]\n", []string{
			`line 1: resources[0]: unknown key "treshold" (did you mean "threshold"?)`,
			"line 1: resources[0].threshold: 0ms: want more than 0 and at most 10s (the response time important reads are held under; leave it out for the top-level threshold)",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := parseErr(t, tc.yaml), strings.Join(tc.want, "\n"); got != want {
				t.Errorf("error\n got %s\nwant %s", got, want)
			}
		})
	}
}

// Load puts the file in front of every line, as FILE:LINE, the form an
// editor or grep jumps to; so are the warnings it keeps.
func TestLoadNamesFileAndLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sanqos.yaml")
	write := func(doc string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("interval: 1ms\nresources:\n  - name: vg1\n    threshold: 0ms\n")
	_, err := Load(path)
	want := path + ":1: interval: 1ms: want 10ms..10s\n" +
		path + ":4: resources[0].threshold: 0ms: want more than 0 and at most 10s (the response time important reads are held under; leave it out for the top-level threshold)"
	if err == nil || err.Error() != want {
		t.Errorf("error\n got %v\nwant %s", err, want)
	}
	write("resources:\n  - name: vg1\n    important: [10.0.0.1]\n    throttleable: [10.0.0.1]\n")
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.HasPrefix(c.Warnings[0], path+":4: resources[0].throttleable[0]: 10.0.0.1: ") {
		t.Errorf("warnings %q", c.Warnings)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(strings.Repeat("a", MinTokenLen)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tok, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	write("http: 127.0.0.1:9311\ntoken_file: " + tok + "\n")
	_, err = Load(path)
	want = path + ":2: token_file: " + tok + " is readable by group or others (mode -rw-r--r--): chmod 600 it"
	if err == nil || err.Error() != want {
		t.Errorf("token error\n got %v\nwant %s", err, want)
	}
}
