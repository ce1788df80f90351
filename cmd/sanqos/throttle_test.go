package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/sanqos/sanqos/throttle"
)

// `throttle backends` probes every backend on this kernel: each is listed
// once with a reason, auto's choice is the first available of edt, netem
// and delayline, and dry-run is always there.
func TestThrottleBackends(t *testing.T) {
	testenv.RequireRoot(t)
	out, err := run(t, "throttle", "backends", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var bs []throttle.Backend
	if err := json.Unmarshal([]byte(out), &bs); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	var names []string
	for _, b := range bs {
		names = append(names, b.Name)
		if b.Why == "" {
			t.Errorf("%s: no reason given", b.Name)
		}
	}
	if want := []string{"edt", "netem", "delayline", "htb", "delayline+htb", "dry-run"}; strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("backends %v, want %v", names, want)
	}
	table, err := run(t, "throttle", "backends")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(table, "(auto)"); n != 1 {
		t.Errorf("auto marked %d times:\n%s", n, table)
	}
}

// throttle set says what it applied, one line per consumer, and clear
// what it cleared; a refused request prints nothing and exits non-zero.
func TestThrottleSetSaysWhatItApplied(t *testing.T) {
	sock := serveAPI(t, testStatus)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string // lines, in order
	}{
		{"one delay", []string{"set", "10.99.0.3", "--write-delay", "2ms"}, exitOK,
			[]string{"10.99.0.3: read delay none, write delay 2ms, rate cap none, write rate cap none"}},
		{"two consumers", []string{"set", "10.99.0.4", "10.99.0.5", "--read-delay", "4.6ms", "--rate", "10MB/s"}, exitOK,
			[]string{"10.99.0.4: read delay 4.6ms, write delay none, rate cap 10.00 MB/s, write rate cap none",
				"10.99.0.5: read delay 4.6ms, write delay none, rate cap 10.00 MB/s, write rate cap none"}},
		{"mapped v4", []string{"set", "::ffff:10.99.0.6", "--write-delay", "1ms"}, exitOK,
			[]string{"10.99.0.6: read delay none, write delay 1ms, rate cap none, write rate cap none"}},
		{"refused delay", []string{"set", "10.99.0.3", "--write-delay", "150ms"}, exitUsage, nil},
		{"clear", []string{"clear", "10.99.0.3"}, exitOK, []string{"10.99.0.3: cleared"}},
		{"clear all", []string{"clear", "--all"}, exitOK, []string{"cleared every consumer's throttle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, append(append([]string{"throttle"}, tc.args...), "--socket", sock)...)
			if code := exitCode(err); code != tc.code {
				t.Fatalf("exit %d, want %d: %v\n%s", code, tc.code, err, out)
			}
			if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); tc.want != nil && strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("printed\n%s\nwant\n%s", out, strings.Join(tc.want, "\n"))
			}
			if tc.want == nil && out != "" {
				t.Errorf("printed %q on failure", out)
			}
		})
	}
}
