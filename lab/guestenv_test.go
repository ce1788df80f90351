package lab

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	flags, note := DirectIOFlags(p)
	t.Logf("%s: %v %q", p, flags, note)
	if note == "" && strings.Join(flags, " ") != "--bsoflags direct" {
		t.Errorf("flags %v without a note", flags)
	}
	if note != "" && len(flags) != 0 {
		t.Errorf("flags %v with note %q", flags, note)
	}
}
