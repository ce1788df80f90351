package experiments

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/lab"
)

// Every fault of the reliability experiment, injected in the real lab:
// the agent fails open on kill -9 with fio's verified data intact, a
// restarted agent or `sanqos cleanup` removes a crashed one's rules,
// tgtd restarts, address changes, LUN and device removal and clock steps
// leave it running and throttling only what exists, the delay line at its
// maximum delay causes no loss, and a short soak (36 s: scale 0.02 of the
// experiment's 30 minutes) stays flat. Each row
// asserts its own expectation, and this test fails on any row that did
// not; it also checks what it can without the experiment's verdicts: the
// rows are the twelve faults, each measured, the summary's pass is theirs,
// RELIABILITY.md has a row each, the delay line's two limits cost no
// retransmission timeout by the namespaces' own counters, and no rule or
// set of an agent is left in the target's namespace.
func TestReliabilityFaultsInLab(t *testing.T) {
	upLab(t)
	buildSanqos(t)
	r, err := lab.NewRunner(context.Background(), "reliability", lab.RunOptions{Scale: 0.02, Results: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out, err := runReliability(wrap(r, Options{}))
	if err != nil && !errors.Is(err, ErrFaultsFailed) {
		t.Fatalf("reliability: %v", err)
	}
	sum, ok := out.(ReliabilitySummary)
	if !ok {
		t.Fatalf("reliability returned %T, want its summary (err %v)", out, err)
	}
	names := map[string]bool{}
	pass := true
	for _, f := range sum.Faults {
		t.Logf("%s: %s [tcp %+v, warnings %d]", f.Name, f.Result, f.TCP, f.LogLines)
		if !f.Pass {
			t.Errorf("%s: expected %q; got %s", f.Name, f.Expect, f.Result)
		}
		pass = pass && f.Pass
		if names[f.Name] || f.Expect == "" || f.Result == "" || f.Data == "" {
			t.Errorf("row %+v: a fault twice, or without its expectation, measurement or data column", f)
		}
		names[f.Name] = true
		if f.Data == "**failed**" {
			t.Errorf("%s: fio's verified data failed", f.Name)
		}
		if strings.HasPrefix(f.Name, "delay line ") && f.TCP.Timeouts != 0 {
			t.Errorf("%s: %d retransmission timeouts in the namespaces' counters", f.Name, f.TCP.Timeouts)
		}
	}
	if len(sum.Faults) != 12 {
		t.Errorf("%d faults ran, want 12", len(sum.Faults))
	}
	if sum.Pass != pass || (err == nil) != pass {
		t.Errorf("summary pass %v, error %v; the rows say %v", sum.Pass, err, pass)
	}
	md, rerr := os.ReadFile(filepath.Join(r.Dir, "RELIABILITY.md"))
	// The header is the first line; each row starts a line with "| ".
	if rows := strings.Count(string(md), "\n| "); rerr != nil || rows != len(sum.Faults) {
		t.Errorf("RELIABILITY.md: %d rows under the header (%v), want one per fault", rows, rerr)
	}
	for _, c := range [][]string{{"iptables-save"}, {"ipset", "list", "-n"}} {
		o, err := lab.InNS(lab.TargetNS, c[0], c[1:]...)
		if err != nil {
			t.Errorf("%s: %v", c[0], err)
		}
		for _, l := range strings.Split(o, "\n") {
			if strings.Contains(l, "sanqos") {
				t.Errorf("left in %s after the faults (%s): %s", lab.TargetNS, c[0], l)
			}
		}
	}
}
