package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/cli"
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
	if want := []string{"edt", "netem", "delayline", "htb", "delayline+htb", "edt+htb", "dry-run"}; strings.Join(names, ",") != strings.Join(want, ",") {
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
		{"one delay", []string{"set", "10.99.0.3", "--write-delay", "2ms"}, cli.ExitOK,
			[]string{"10.99.0.3: read delay none, write delay 2ms, rate cap none, write rate cap none"}},
		{"two consumers", []string{"set", "10.99.0.4", "10.99.0.5", "--read-delay", "4.6ms", "--rate", "10MB/s"}, cli.ExitOK,
			[]string{"10.99.0.4: read delay 4.6ms, write delay none, rate cap 10.00 MB/s, write rate cap none",
				"10.99.0.5: read delay 4.6ms, write delay none, rate cap 10.00 MB/s, write rate cap none"}},
		{"mapped v4", []string{"set", "::ffff:10.99.0.6", "--write-delay", "1ms"}, cli.ExitOK,
			[]string{"10.99.0.6: read delay none, write delay 1ms, rate cap none, write rate cap none"}},
		{"refused delay", []string{"set", "10.99.0.3", "--write-delay", "150ms"}, cli.ExitUsage, nil},
		{"clear", []string{"clear", "10.99.0.3"}, cli.ExitOK, []string{"10.99.0.3: cleared"}},
		{"clear all", []string{"clear", "--all"}, cli.ExitOK, []string{"cleared every consumer's throttle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, append(append([]string{"throttle"}, tc.args...), "--socket", sock)...)
			if code := cli.ExitCode(err); code != tc.code {
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

// Every throttle subcommand that takes or prints an address, over every
// form an operator may type: none panics; IPv4, IPv4-mapped and IPv6
// addresses reach the agent (a mapped one as IPv4) and come back in
// list; a zone or garbage is a usage error naming the argument, and
// changes nothing. (backends takes no address.)
func TestThrottleCommandsOnEveryAddress(t *testing.T) {
	for _, tc := range []struct {
		name, arg, shown string // shown: as set, clear and list print it
		code             int
		why              string // in the usage error
	}{
		{"IPv4", "10.99.0.7", "10.99.0.7", cli.ExitOK, ""},
		{"IPv4-mapped IPv6", "::ffff:10.99.0.8", "10.99.0.8", cli.ExitOK, ""},
		{"IPv6", "fd00:99::7", "fd00:99::7", cli.ExitOK, ""},
		{"link-local with zone", "fe80::7%eth0", "", cli.ExitUsage, "without its zone (%eth0)"},
		{"garbage", "10.99.0.300", "", cli.ExitUsage, `"10.99.0.300" is not an IPv4/IPv6 address`},
		{"hostname", "storage1", "", cli.ExitUsage, `"storage1" is not an IPv4/IPv6 address`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := serveAPI(t, testStatus)
			ok := tc.code == cli.ExitOK
			for _, step := range []struct {
				args   []string
				listed bool
			}{
				{[]string{"set", tc.arg, "--read-delay", "3ms"}, false},
				{[]string{"list"}, ok},
				{[]string{"clear", tc.arg}, false},
				{[]string{"list"}, false},
			} {
				out, err := run(t, append(append([]string{"throttle"}, step.args...), "--socket", sock)...)
				said := out + errString(err)
				if step.args[0] == "list" {
					if cli.ExitCode(err) != cli.ExitOK {
						t.Fatalf("list: exit %d: %s", cli.ExitCode(err), said)
					}
					if listed := ok && strings.Contains(out, "\n"+tc.shown+" "); listed != step.listed {
						t.Errorf("list: %s listed %v, want %v:\n%s", tc.shown, listed, step.listed, out)
					}
					continue
				}
				switch code := cli.ExitCode(err); {
				case code != tc.code:
					t.Fatalf("%v: exit %d, want %d: %s", step.args, code, tc.code, said)
				case ok && !strings.HasPrefix(out, tc.shown+": "):
					t.Errorf("%v printed %q, want it about %s", step.args, out, tc.shown)
				case !ok && !strings.Contains(said, tc.why):
					t.Errorf("%v: %q lacks %q", step.args, said, tc.why)
				}
			}
		})
	}
}
