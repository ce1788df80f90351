package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// config check says what is wrong, where and what would be right, and
// exits 3 (issue 32 item 6's config edges), or says ok.
func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	res := "resources:\n  - name: vg1\n"
	for _, tc := range []struct {
		name, yaml string
		flags      []string
		code       int
		want       string
	}{
		{"valid", "threshold: 10ms\n" + res, nil, exitOK, "ok (1 resources, backend auto, threshold 10ms"},
		{"threshold 0", "threshold: 0ms\n" + res, nil, exitConfig, "line 1: threshold: 0s: want more than 0 and at most 10s"},
		{"bare number", "threshold: 15\n" + res, nil, exitConfig, "line 1: threshold: 15 is a bare number: want a duration with a unit, e.g. 15ms"},
		{"unknown key", "treshold: 10ms\n" + res, nil, exitConfig, `line 1: unknown key "treshold" (did you mean "threshold"?)`},
		{"nested unknown key", res + "    polcy: weighted\n", nil, exitConfig, `line 3: resources[0]: unknown key "polcy" (did you mean "policy"?)`},
		{"empty", "", nil, exitConfig, "resources: none listed: the agent would start but protect nothing"},
		{"comments only", "# threshold: 10ms\n", nil, exitConfig, "protect nothing"},
		{"no resources", "threshold: 10ms\n", nil, exitConfig, "protect nothing"},
		{"no resources allowed", "threshold: 10ms\n", []string{"--allow-no-resources"}, exitOK, "warning: resources: none listed"},
		{"not yaml", "threshold: [\n", nil, exitConfig, "yaml: line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := run(t, append([]string{"config", "check", path}, tc.flags...)...)
			if code := exitCode(err); code != tc.code {
				t.Fatalf("exit %d, want %d: %v\n%s", code, tc.code, err, out)
			}
			if got := out + errString(err); !strings.Contains(got, tc.want) {
				t.Errorf("said %q, want %q", got, tc.want)
			}
			if tc.code != exitOK && strings.Contains(out, ": ok (") {
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
