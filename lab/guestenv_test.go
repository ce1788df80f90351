package lab

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/config"
)

// A summary made in the guest names its accelerator and kernel first and
// stays valid JSON; on the host it is unchanged.
func TestWithGuestFields(t *testing.T) {
	b, _ := json.MarshalIndent(map[string]int{"runs": 3}, "", "  ")
	if got := withGuestFields(b, "", "6.18"); string(got) != string(b) {
		t.Errorf("host summary changed: %s", got)
	}
	got := withGuestFields(b, "tcg", "6.1.0-56-amd64")
	var m map[string]any
	if err := json.Unmarshal(got, &m); err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	if m["accelerator"] != "tcg" || m["kernel"] != "6.1.0-56-amd64" || m["runs"] != 3.0 {
		t.Errorf("got %v", m)
	}
	if !strings.HasPrefix(string(got), "{\n  \"accelerator\": \"tcg\",\n  \"kernel\"") {
		t.Errorf("not first:\n%s", got)
	}
	empty := withGuestFields([]byte("{}"), "kvm", "6.1")
	if err := json.Unmarshal(empty, &m); err != nil {
		t.Errorf("%v: %s", err, empty)
	}
}

// A backing file that takes O_DIRECT keeps tgt's direct flag.
func TestDirectIOFlags(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lun.img")
	if err := os.WriteFile(p, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	flags, note := directIOFlags(p)
	t.Logf("%s: %v %q", p, flags, note)
	if note == "" && strings.Join(flags, " ") != "--bsoflags direct" {
		t.Errorf("flags %v without a note", flags)
	}
	if note != "" && len(flags) != 0 {
		t.Errorf("flags %v with note %q", flags, note)
	}
}

// On a modelled disk slower than the default (the stock-kernel guest's
// 4 MB/s), the agent's heavy-writer floor scales with it; on the
// default disk the agent's own default stays.
func TestAgentWriteFloorFollowsTheDisk(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		bw   float64
		want float64
	}{{4e6, 0.1}, {DefaultOptions().Model.Bandwidth, config.Defaults().WriteMBs}} {
		o := DefaultOptions()
		o.Model.Bandwidth = tc.bw
		r := &Runner{Res: &Resource{Name: "vg1"}, State: &State{Options: o}}
		p := filepath.Join(dir, "agent.yaml")
		if err := r.writeAgentConfig(p, "delayline", "127.0.0.1:9311", 40*time.Millisecond, true); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.WriteMBs != tc.want {
			t.Errorf("disk %g B/s: throttleable_write_mb_s %g, want %g", tc.bw, cfg.WriteMBs, tc.want)
		}
	}
}
