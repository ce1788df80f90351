package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/cli"
)

// The command line's rough edges an operator found by trying, one row
// each, through the command line itself: each failure says clearly what
// is wrong and what would be right, and exits non-zero with its kind's
// status (2 usage, 3 config, 1 runtime: docs/cli.md); what succeeds says
// so. The rows' own tests go further (TestUnknownSubcommand,
// TestConfigCheck, TestExitCodes, TestOneFlagNamePerConcept,
// TestThrottleSetSaysWhatItApplied, TestStatusJSON,
// TestHelpHasNoInternalRefs); this table is the list in one place, and
// is one function for that reason: its length is the rows.
func TestCLIEdges(t *testing.T) {
	dir := t.TempDir()
	res := "resources:\n  - name: vg1\n"
	for name, yaml := range map[string]string{
		"threshold-0.yaml":    "threshold: 0ms\n" + res,
		"threshold-bare.yaml": "threshold: 15\n" + res,
		"typo.yaml":           "treshold: 15ms\n" + res,
		"empty.yaml":          "",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sock := serveAPI(t, testStatus)
	noAgent := filepath.Join(dir, "none.sock")
	for _, tc := range []struct {
		edge    string
		args    []string // {dir}, {sock} and {none} stand for the paths
		code    int
		want    []string // in what it printed and its error
		notWant []string // what it used to say
	}{
		// A mistyped subcommand under a group printed the group's help
		// and exited 0.
		{"mistyped subcommand: config chek", []string{"config", "chek"}, cli.ExitUsage,
			[]string{`unknown command "chek"`, "Did you mean this?\n\tcheck"}, []string{"SYNOPSIS"}},
		{"mistyped subcommand: throttle clear-all", []string{"throttle", "clear-all"}, cli.ExitUsage,
			[]string{"Did you mean this?\n\tclear --all"}, []string{"SYNOPSIS"}},
		{"mistyped subcommand: cluster polcy", []string{"cluster", "polcy"}, cli.ExitUsage,
			[]string{"Did you mean this?\n\tpolicy"}, []string{"SYNOPSIS"}},
		// Config values and keys.
		{"threshold: 0ms", []string{"config", "check", "{dir}/threshold-0.yaml"}, cli.ExitConfig,
			[]string{"threshold-0.yaml:1: threshold: 0ms: want more than 0 and at most 10s", "e.g. 15ms"}, []string{"want 0..10s"}},
		{"threshold: 15 (no unit)", []string{"config", "check", "{dir}/threshold-bare.yaml"}, cli.ExitConfig,
			[]string{"threshold-bare.yaml:1: threshold: 15 is a bare number: want a duration with a unit, e.g. 15ms"}, []string{"unmarshal", "time.Duration"}},
		{"unknown key", []string{"config", "check", "{dir}/typo.yaml"}, cli.ExitConfig,
			[]string{`typo.yaml:1: unknown key "treshold" (did you mean "threshold"?)`}, []string{"not found in type", "config.Config"}},
		{"empty config file", []string{"config", "check", "{dir}/empty.yaml"}, cli.ExitConfig,
			[]string{"resources: none listed: the agent would start but protect nothing"}, []string{"ok (0 resources)"}},
		// One flag name per concept: --iscsi-port, --interface, --iqn;
		// a near miss names the right one, an old name still works and
		// says the new one.
		{"flag typo names the flag", []string{"agent", "--devic", "eth0"}, cli.ExitUsage,
			[]string{"did you mean --interface?"}, nil},
		{"old flag --device", []string{"agent", "--device", "eth0", "--help"}, cli.ExitOK,
			[]string{"--device has been deprecated, use --interface"}, nil},
		{"old flag --port", []string{"advise", "--port", "3260", "--help"}, cli.ExitOK,
			[]string{"--port has been deprecated, use --iscsi-port"}, nil},
		{"old flag advise --target", []string{"advise", "--target", "iqn.2026-11.lab:vg1", "--help"}, cli.ExitOK,
			[]string{"--target has been deprecated, use --iqn"}, nil},
		{"one name: advise", []string{"advise", "--help"}, cli.ExitOK,
			[]string{"--iscsi-port", "--iqn"}, []string{"--port ", "--target "}},
		{"one name: capture", []string{"capture", "--help"}, cli.ExitOK,
			[]string{"--iscsi-port", "--interface"}, []string{"--port ", "--device "}},
		// throttle set printed nothing on success.
		{"throttle set says what it applied", []string{"throttle", "set", "10.99.0.3", "--write-delay", "2ms", "--socket", "{sock}"}, cli.ExitOK,
			[]string{"10.99.0.3: read delay none, write delay 2ms, rate cap none, write rate cap none"}, nil},
		// Every failure exited 1: usage 2 and config 3 above, runtime 1.
		{"runtime failure: no agent", []string{"status", "--socket", "{none}"}, cli.ExitRuntime,
			[]string{"agent"}, nil},
		{"usage failure: bad value", []string{"throttle", "set", "10.99.0.3", "--write-delay", "2", "--socket", "{sock}"}, cli.ExitUsage,
			[]string{`--write-delay: delay "2": want a duration such as 4.6ms`}, nil},
		{"exit statuses documented", []string{"--help"}, cli.ExitOK,
			[]string{"EXIT STATUS", "2  usage", "3  config"}, nil},
		// The status JSON had delay_ns beside threshold_ms.
		{"status JSON in ms", []string{"status", "--json", "--socket", "{sock}"}, cli.ExitOK,
			[]string{`"delay_ms": 2`, `"threshold_ms": 15`, `"indicator_ms": 16.5`, `"write_delay_ms": 2`, `"unthrottled_ports": [`}, nil},
		// Help texts cited issue numbers.
		{"help without issue numbers", []string{"agent", "--help"}, cli.ExitOK,
			[]string{"--dry-run"}, []string{"issue ", "(#"}},
	} {
		t.Run(tc.edge, func(t *testing.T) {
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				args[i] = strings.NewReplacer("{dir}", dir, "{sock}", sock, "{none}", noAgent).Replace(a)
			}
			out, err := run(t, args...)
			if code := cli.ExitCode(err); code != tc.code {
				t.Fatalf("exit %d, want %d (%v)\n%s", code, tc.code, err, out)
			}
			said := out + errString(err)
			for _, w := range tc.want {
				if !strings.Contains(said, w) {
					t.Errorf("lacks %q:\n%s", w, said)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(said, w) {
					t.Errorf("says %q:\n%s", w, said)
				}
			}
		})
	}
}
