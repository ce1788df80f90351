package discover

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// configfs builds a configfs mount point whose target/ and nvmet/ are
// the captured trees named (""): absent).
func configfs(t *testing.T, lio, nvmet string) string {
	t.Helper()
	root := t.TempDir()
	for name, from := range map[string]string{"target": lio, "nvmet": nvmet} {
		if from == "" {
			continue
		}
		abs, err := filepath.Abs(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// auto finds each target software present on the host (here: the
// guest's captured LIO and nvmet configfs trees) and merges their
// targets; with none, it says what it looked for. noTgt is a control
// port whose tgtd socket does not exist.
func TestAutoFindsAndMerges(t *testing.T) {
	const noTgt = 65531
	lio, nvmet := filepath.Join("testdata", "lio-guest", "target"), filepath.Join("testdata", "nvmet-guest", "nvmet")
	brokenNVMet := t.TempDir()
	if err := os.MkdirAll(filepath.Join(brokenNVMet, "subsystems"), 0o755); err != nil { // no ports/: not as the kernel builds it
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		lio, nvmet string
		found      []string
		iqns       []string // some of the merged targets
		err        string
	}{
		{"LIO and nvmet", lio, nvmet, []string{"lio", "nvmet"}, []string{"iqn.2026-11.lab:vg1", "nqn.2026-11.lab:vg1", "nqn.2026-11.lab:ram"}, ""},
		{"LIO only", lio, "", []string{"lio"}, []string{"iqn.2026-11.lab:vg1"}, ""},
		{"nvmet only", "", nvmet, []string{"nvmet"}, []string{"nqn.2026-11.lab:vg1"}, ""},
		{"nothing", "", "", nil, nil, "no target software found: tgt: no control socket /var/run/tgtd/socket.65531; lio: no "},
		{"a present source that fails fails the round", lio, brokenNVMet, []string{"lio", "nvmet"}, nil, "nvmet: discover: nvmet:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			targets, found, err := ReadAll(AutoProbes(noTgt, configfs(t, tc.lio, tc.nvmet), nil))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(found, tc.found) {
				t.Errorf("found %v, want %v", found, tc.found)
			}
			have := map[string]bool{}
			for _, tg := range targets {
				have[tg.IQN] = true
			}
			for _, iqn := range tc.iqns {
				if !have[iqn] {
					t.Errorf("merged targets lack %s: %v", iqn, have)
				}
			}
		})
	}
}

// Probes are read in order and only when present; tgt's is tgtd
// answering (here a canned tgtadm output).
func TestReadAllOnlyReadsWhatIsPresent(t *testing.T) {
	out, err := os.ReadFile(filepath.Join("testdata", "tgtadm-sessions.txt"))
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	probes := []Probe{
		{Name: "tgt", Present: func() bool { return true }, Read: func() ([]Target, error) { read++; return ParseTgtadm(out) }},
		{Name: "lio", Present: func() bool { return false }, Read: func() ([]Target, error) { t.Error("read an absent source"); return nil, nil }},
	}
	targets, found, err := ReadAll(probes)
	if err != nil || read != 1 || !reflect.DeepEqual(found, []string{"tgt"}) || len(targets) == 0 {
		t.Fatalf("targets %d, found %v, err %v, tgt read %d times", len(targets), found, err, read)
	}
	probes[0].Read = func() ([]Target, error) { return nil, errors.New("tgtadm: can't connect") }
	if _, _, err := ReadAll(probes); err == nil || err.Error() != "tgt: tgtadm: can't connect" {
		t.Errorf("err = %v", err)
	}
}
