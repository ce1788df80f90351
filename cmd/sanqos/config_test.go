package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/internal/cli"
)

// config check says what is wrong, where (FILE:LINE) and what would be
// right, and exits 3 (issue 32 item 6's config edges, issue 52 item 7's
// warnings and --strict), or says ok. {file} stands for the file's path.
func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	hostDevices = func() ([]string, error) { return []string{"loop0", "loop1", "vda"}, nil }
	defer func() { hostDevices = config.Diskstats("/proc") }()
	res := "resources:\n  - name: vg1\n"
	both := res + "    important: [10.0.0.1]\n    throttleable: [10.0.0.1]\n"
	both1 := "warning: {file}:4: resources[0].throttleable[0]: 10.0.0.1: also important (important[0] on line 3): an important consumer is never slowed, so this entry does nothing"
	for _, tc := range []struct {
		name, yaml string
		flags      []string
		code       int
		want       string
	}{
		{"valid", "threshold: 10ms\n" + res, nil, cli.ExitOK, "{file}: ok (1 resources, backend auto, threshold 10ms"},
		{"threshold 0", "threshold: 0ms\n" + res, nil, cli.ExitConfig, "{file}:1: threshold: 0ms: want more than 0 and at most 10s"},
		{"bare number", "threshold: 15\n" + res, nil, cli.ExitConfig, "{file}:1: threshold: 15 is a bare number: want a duration with a unit, e.g. 15ms"},
		{"unknown key", "treshold: 10ms\n" + res, nil, cli.ExitConfig, `{file}:1: unknown key "treshold" (did you mean "threshold"?)`},
		{"nested unknown key", res + "    polcy: weighted\n", nil, cli.ExitConfig, `{file}:3: resources[0]: unknown key "polcy" (did you mean "policy"?)`},
		{"in line order", res + "    threshold: 0ms\ninterval: 1ms\n", nil, cli.ExitConfig, "{file}:3: resources[0].threshold: 0ms: want more than 0 and at most 10s (the response time important reads are held under; leave it out for the top-level threshold)\n" +
			"{file}:4: interval: 1ms: want 10ms..10s"},
		{"empty", "", nil, cli.ExitConfig, "{file}: resources: none listed: the agent would start but protect nothing"},
		{"comments only", "# threshold: 10ms\n", nil, cli.ExitConfig, "protect nothing"},
		{"no resources", "threshold: 10ms\n", nil, cli.ExitConfig, "protect nothing"},
		{"no resources allowed", "threshold: 10ms\n", []string{"--allow-no-resources"}, cli.ExitOK, "warning: {file}: resources: none listed"},
		{"no resources allowed, strict", "threshold: 10ms\n", []string{"--allow-no-resources", "--strict"}, cli.ExitOK, "warning: {file}: resources: none listed"},
		{"not yaml", "threshold: [\n", nil, cli.ExitConfig, `{file}:1: not YAML: "threshold: [": did not find expected node content`},
		{"mis-indented", res + "    devices: [loop0]\n   threshold: 5ms\n", nil, cli.ExitConfig,
			`{file}:4: not YAML: "   threshold: 5ms": did not find expected '-' indicator (indent it as the other keys of its block, or the entries of its list)`},
		{"important and throttleable", both, nil, cli.ExitOK, both1},
		{"important and throttleable, strict", both, []string{"--strict"}, cli.ExitConfig, both1 + "\n{file}: refused: 1 warnings and --strict"},
		{"devices there", res + "    devices: [loop0, vda]\n", []string{"--strict"}, cli.ExitOK, "{file}: ok (1 resources"},
		{"device not there", res + "    devices: [loop0, loop8]\n", nil, cli.ExitOK,
			"warning: {file}:3: resources[0].devices[1]: loop8: not in /proc/diskstats: the agent would measure no read wait on it"},
		{"device not there, strict", res + "    devices: [sdb]\n", []string{"--strict"}, cli.ExitConfig,
			"warning: {file}:3: resources[0].devices[0]: sdb: not in /proc/diskstats: the agent would measure no read wait on it\n{file}: refused: 1 warnings and --strict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := run(t, append([]string{"config", "check", path}, tc.flags...)...)
			if code := cli.ExitCode(err); code != tc.code {
				t.Fatalf("exit %d, want %d: %v\n%s", code, tc.code, err, out)
			}
			if got, want := out+errString(err), strings.ReplaceAll(tc.want, "{file}", path); !strings.Contains(got, want) {
				t.Errorf("said %q, want %q", got, want)
			}
			if tc.code != cli.ExitOK && strings.Contains(out, ": ok (") {
				t.Errorf("said ok: %s", out)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// docs/cli.md's examples of config errors are what config check prints
// for the files they come from.
func TestCLIDocConfigErrors(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(string(b), "## Config errors")
	var blocks []string
	for i, part := range strings.Split(sec, "```") {
		if i%2 == 1 {
			blocks = append(blocks, strings.TrimSpace(part))
		}
	}
	files := []string{
		"treshold: 10ms\nresources:\n  - {name: vg1, polcy: weighted}\npid: {ti: 200}\n# below: the response time\nthreshold: 0ms\n",
		"resources:\n  - name: a\n    important: [10.0.0.1]\n    devices: [loop0]\n   threshold: 5ms\n",
	}
	if len(blocks) < len(files) {
		t.Fatalf("%d examples in docs/cli.md's Config errors, want %d", len(blocks), len(files))
	}
	dir := t.TempDir()
	for i, f := range files {
		path := filepath.Join(dir, "sanqos.yaml")
		if err := os.WriteFile(path, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := run(t, "config", "check", path)
		if want := strings.ReplaceAll(blocks[i], "/etc/sanqos/sanqos.yaml", path); errString(err) != want {
			t.Errorf("example %d: config check says\n%s\ndocs/cli.md shows\n%s", i+1, errString(err), want)
		}
	}
}

// A config's errors are printed as they are, each line FILE:LINE: first
// (no "sanqos: " before the first), so editors and grep take them as a
// compiler's; other errors keep the prefix.
func TestPrintConfigErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sanqos.yaml")
	if err := os.WriteFile(path, []byte("interval: 1ms\nbackend: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, "config", "check", path)
	var b strings.Builder
	check, _, _ := rootCmd().Find([]string{"config", "check"})
	cli.PrintError(&b, check, err)
	want := path + ":1: interval: 1ms: want 10ms..10s\n" + path + ":2: backend: x: want auto|edt|netem|delayline|htb|delayline+htb|edt+htb|dry-run\n"
	if b.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	_, err = run(t, "config", "check", path+".none")
	if cli.PrintError(&b, check, err); !strings.HasPrefix(b.String(), "sanqos: open "+path+".none") {
		t.Errorf("printed %q", b.String())
	}
}
