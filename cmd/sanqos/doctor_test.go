package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A config the agent would refuse makes doctor exit non-zero, naming the
// failed check, and --json stays one parseable document on stdout.
func TestDoctorExitAndJSON(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("interval: -1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	root := rootCmd()
	root.SetOut(&out)
	root.SetArgs([]string{"doctor", "--config", bad, "--json"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "the agent could not run (failed: config") {
		t.Fatalf("err %v, want the agent could not run (failed: config...)", err)
	}
	var rep struct {
		Config string `json:"config"`
		OK     bool   `json:"ok"`
		Checks []struct {
			Name, Status, Summary string
		} `json:"checks"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	if rep.OK || rep.Config != bad || len(rep.Checks) == 0 || rep.Checks[0].Name != "config" || rep.Checks[0].Status != "fail" {
		t.Errorf("report %+v", rep)
	}
}
