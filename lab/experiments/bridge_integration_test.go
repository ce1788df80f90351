package experiments

import (
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// The agent on the bridge (sqlan, mode bridge), given only a 15 ms
// threshold and the target's portal, measures the reader's latency on the
// wire, throttles the writers on FORWARD until the reader's wait (as the
// target's diskstats see it) is back near the threshold, lifts every
// throttle after the load ends, and leaves no rule in sqlan when stopped.
func TestBridgeAgentHoldsThresholdInLab(t *testing.T) {
	thr := 15 * time.Millisecond
	r, a := startLabAgent(t, "bridge-agent-test",
		func(r *runner, cfg string) error { return r.bridgeAgentConfig(cfg, thr) },
		func(r *runner, cfg string) (*lab.LabAgent, error) {
			return lab.StartAgentIn(lab.SwitchNS, "agent", "delayline", r.Dir, "--config", cfg)
		})
	const lead, writing, after = 3 * time.Second, 20 * time.Second, 6 * time.Second
	p := &lab.Phase{Name: "bridge", Label: "bridge agent on", Length: lead + writing + after, From: lead, To: lead + writing,
		Jobs: append([]lab.Job{r.reader(lead + writing + after)}, r.writers(12, lead, writing)...)}
	var throttledDuring, throttledAfter int
	var passiveBefore float64
	var during []string
	p.Events = []lab.Event{
		{At: lead - 500*time.Millisecond, Name: "passive signal before load", Do: func() error {
			var st statusDoc
			err := a.Status(&st)
			if err == nil && len(st.Resources) > 0 && st.Resources[0].RawWaitMs != nil {
				passiveBefore = *st.Resources[0].RawWaitMs
			}
			return err
		}},
		{At: lead + writing - time.Second, Name: "check during", Do: func() error {
			m, err := a.List()
			throttledDuring = len(m)
			for c := range m {
				during = append(during, c.String())
			}
			return err
		}},
		{At: lead + writing + after - 500*time.Millisecond, Name: "check after", Do: func() error {
			m, err := a.List()
			throttledAfter = len(m)
			return err
		}},
	}
	res, err := r.Run(p, 0)
	if err != nil {
		t.Fatal(err)
	}
	late := meanOver(res, "b2", lead+writing/2, lead+writing, readWait)
	wr := 0.0
	for _, h := range lab.Hosts[1:] {
		wr += meanOver(res, h, lead+writing/2, lead+writing, writeMBs)
	}
	t.Logf("passive read wait before the load %.2f ms; reader wait (diskstats) in the 2nd half of the load: %.1f ms (threshold %v); writes %.1f MB/s; throttled during %v, after %d; tcp %+v",
		passiveBefore, late, thr, wr, during, throttledAfter, res.TCP)
	if passiveBefore <= 0 {
		t.Errorf("no passive read wait before the load (%v): the capture sees no SCSI READs", passiveBefore)
	}
	if late > 1.25*float64(thr)/1e6 {
		t.Errorf("reader's mean wait %.1f ms is above 1.25 × threshold %v with the bridge agent on", late, thr)
	}
	if throttledDuring != 3 || strings.Contains(strings.Join(during, ","), lab.HostAddr("b2").String()) {
		t.Errorf("throttled %v under load, want the 3 writers (b3..b5), never the reader", during)
	}
	if throttledAfter != 0 {
		t.Errorf("%d consumers still throttled %v after the load ended", throttledAfter, after)
	}
	if wr < 5 {
		t.Errorf("writers starved: %.1f MB/s", wr)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"iptables-save"}, {"ip6tables-save"}, {"ipset", "list", "-n"}} {
		out, err := lab.InNS(lab.SwitchNS, cmd[0], cmd[1:]...)
		if err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
		if strings.Contains(out, "sanqos") || strings.Contains(out, "NFQUEUE") {
			t.Errorf("%v in sqlan after the agent stopped:\n%s", cmd, out)
		}
	}
}
