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
