package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/version"
)

// version --json prints exactly one object with the five documented keys,
// holding what the linker set and the toolchain and platform it ran on.
// The Debian package builder parses this output for its version.
func TestVersionJSON(t *testing.T) {
	oldV, oldC := version.Version, version.Commit
	t.Cleanup(func() { version.Version, version.Commit = oldV, oldC })
	version.Version = "v1.2.3-4-gabcdef0"
	version.Commit = "abcdef0123456789abcdef0123456789abcdef01"

	out, err := run(t, "version", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Version   string `json:"version"`
		Commit    string `json:"commit"`
		GoVersion string `json:"go_version"`
		OS        string `json:"os"`
		Arch      string `json:"arch"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%v in:\n%s", err, out)
	}
	if dec.More() {
		t.Errorf("more than one JSON value:\n%s", out)
	}
	want := map[string][2]string{
		"version":    {got.Version, version.Version},
		"commit":     {got.Commit, version.Commit},
		"go_version": {got.GoVersion, runtime.Version()},
		"os":         {got.OS, runtime.GOOS},
		"arch":       {got.Arch, runtime.GOARCH},
	}
	for k, v := range want {
		if v[0] != v[1] {
			t.Errorf("%s = %q, want %q", k, v[0], v[1])
		}
	}
	// Exactly these keys: nothing undocumented.
	var keys map[string]any
	if err := json.Unmarshal([]byte(out), &keys); err != nil || len(keys) != len(want) {
		t.Errorf("keys %v (%v), want %d", keys, err, len(want))
	}
}

// Without --json the one-line form is unchanged: name, version, short commit.
func TestVersionText(t *testing.T) {
	oldV, oldC := version.Version, version.Commit
	t.Cleanup(func() { version.Version, version.Commit = oldV, oldC })
	version.Version = "v1.2.3"
	version.Commit = "abcdef0123456789abcdef0123456789abcdef01"
	out, err := run(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	if want := "sanqos v1.2.3 (abcdef012345)\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
}
