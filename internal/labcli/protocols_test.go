package labcli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A --protocol invocation's side-by-side rows come from each protocol's
// summary.json: a backup's kept throughput is reads plus writes, a
// writers' load's its writes; a run without criteria (no threshold) adds
// no row.
func TestProtocolRows(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, json string
		want       []protocolRow
	}{
		{"writers", `{"regulated": [{"threshold_ms": 15, "criteria": {"p95_x_threshold": 1.1, "write_kept_vs_oracle": 0.95, "retrans_segs": 3, "baseline_retrans_segs": 5}}, {"threshold_ms": 20}]}`,
			[]protocolRow{{Protocol: "nvme-tcp", ThresholdMs: 15, P95X: 1.1, KeptVsOracle: 0.95, Retrans: 3, BaselineRetrans: 5}}},
		{"backup", `{"regulated": [{"threshold_ms": 20, "criteria": {"p95_x_threshold": 0.9, "write_kept_vs_oracle": 0, "moved_kept_vs_oracle": 1.02}}]}`,
			[]protocolRow{{Protocol: "nvme-tcp", ThresholdMs: 20, P95X: 0.9, KeptVsOracle: 1.02}}},
		{"interference", `{"runs": []}`, nil},
	} {
		p := filepath.Join(dir, c.name+".json")
		os.WriteFile(p, []byte(c.json), 0o644)
		got, err := protocolRows("nvme-tcp", p)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

// --protocol names the protocols it knows before touching the lab.
func TestLabRunProtocolUnknown(t *testing.T) {
	t.Setenv("SANQOS_GUEST_DIR", t.TempDir())
	_, err := run(t, "lab", "run", "autonomic", "--kernel", "host", "--protocol", "fc")
	if err == nil || !strings.Contains(err.Error(), `--protocol "fc": want iscsi or nvme-tcp`) {
		t.Errorf("lab run --protocol fc: %v", err)
	}
}
