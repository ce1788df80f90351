package experiments

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// delay-sweep on each initiator: fio's streams go to b2's LUN as the lab
// reaches it (libiscsi URL, or the kernel initiator's block device with
// libaio, its N threads on the one session), and the initiator's TCP
// counters come from the namespace that holds its sockets (b2's own, or
// the initial one with the kernel initiator).
func TestSweepPerInitiator(t *testing.T) {
	libiscsiURL := `iscsi\://10.99.0.1\:3260/iqn.2026-11.lab\:vg1/1`
	for _, c := range []struct {
		name         string
		opts         lab.Options
		url          string
		engine       string
		initiatorNS  string
		kernelString bool
	}{
		{"tgt, libiscsi", lab.DefaultOptions(), libiscsiURL, "ioengine=libiscsi\nthread\ninitiator=iqn.2026-11.lab:b2\n", "b2", false},
		{"lio, libiscsi", lab.Options{Target: lab.TargetLIO}, libiscsiURL, "ioengine=libiscsi\n", "b2", false},
		{"lio, kernel initiator", lab.Options{Target: lab.TargetLIO, Initiator: lab.InitiatorKernel}, "/dev/sda", "ioengine=libaio\ndirect=1\nthread\n", "", true},
	} {
		for _, streams := range []int{0, 12} {
			t.Run(fmt.Sprintf("%s, streams %d", c.name, streams), func(t *testing.T) {
				res := &lab.Resource{Name: "vg1"}
				for i, h := range lab.Hosts {
					res.LUNs = append(res.LUNs, lab.LUN{Host: h, Number: i + 1, URL: "elsewhere"})
				}
				res.LUNs[0].URL = c.url
				s := &lab.State{Options: c.opts}
				r := wrap(lab.PlanRunner(s, res, lab.RunOptions{Scale: 0.25}), Options{Streams: streams})
				pl := r.sweepPlan()
				if pl.targetNS != lab.TargetNS || pl.initiatorNS != c.initiatorNS {
					t.Errorf("TCP counters from %q and %q, want %q and %q", pl.targetNS, pl.initiatorNS, lab.TargetNS, c.initiatorNS)
				}
				wantDelays, wantJobs := SweepDelays, 1
				if streams > 1 {
					wantDelays, wantJobs = SweepManyDelays, streams
				}
				if len(pl.delays) != len(wantDelays) || pl.streams != wantJobs || pl.step != 5*time.Second || pl.reps != 3 {
					t.Errorf("plan %+v", pl)
				}
				p := r.sweepPhase(pl, "read")
				if len(p.Jobs) != 1 || p.Jobs[0].URL != c.url || p.Jobs[0].Host != "b2" || p.Jobs[0].NumJobs != wantJobs || p.Jobs[0].Runtime != pl.length() {
					t.Fatalf("jobs %+v", p.Jobs)
				}
				jf, err := lab.JobFile("b2", p.Jobs, "/tmp/x")
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(jf, c.engine) || !strings.Contains(jf, "filename="+c.url+"\n") {
					t.Errorf("job file lacks %q or the filename:\n%s", c.engine, jf)
				}
				if got := strings.Contains(jf, fmt.Sprintf("numjobs=%d\n", streams)); got != (streams > 1) {
					t.Errorf("numjobs=%d in the job file: %v\n%s", streams, got, jf)
				}
				if got := strings.Contains(sweepSession(s), "kernel-initiator"); got != c.kernelString {
					t.Errorf("session %q", sweepSession(s))
				}
			})
		}
	}
}
