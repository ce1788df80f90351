package main

import (
	"os/exec"
	"strings"
	"testing"
)

// labOnly are the packages the product binary must not link: the lab and
// its QEMU guest runner, the simulator, the reports and their plotting,
// the modelled disk's FUSE, and sanqos-lab's commands. They are
// sanqos-lab's (docs/architecture.md, "Two binaries").
var labOnly = []string{
	module + "lab", // lab, lab/experiments, lab/guest
	module + "sim",
	module + "report",
	module + "internal/labcli",
	"github.com/hanwen/go-fuse",
	"gonum.org/v1/plot",
}

// The binary installed on a storage target links none of the lab's
// packages (what go list -deps says it is built from).
func TestProductLinksNoLab(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps listed %d packages; is it broken?", len(deps))
	}
	for _, d := range deps {
		for _, bad := range labOnly {
			if d == bad || strings.HasPrefix(d, bad+"/") {
				t.Errorf("sanqos links %s", d)
			}
		}
	}
	t.Logf("sanqos is built from %d packages", len(deps))
}
