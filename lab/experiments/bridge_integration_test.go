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
	var passiveBefore float64
	h := runHeldLoad(t, r, a, "bridge", "bridge agent on", "bridge agent", thr,
		lab.Event{At: heldLead - 500*time.Millisecond, Name: "passive signal before load", Do: func() error {
			var st statusDoc
			err := a.Status(&st)
			if err == nil && len(st.Resources) > 0 && st.Resources[0].RawWaitMs != nil {
				passiveBefore = *st.Resources[0].RawWaitMs
			}
			return err
		}})
	t.Logf("passive read wait before the load %.2f ms", passiveBefore)
	if passiveBefore <= 0 {
		t.Errorf("no passive read wait before the load (%v): the capture sees no SCSI READs", passiveBefore)
	}
	if len(h.during) != 3 || strings.Contains(strings.Join(h.during, ","), lab.HostAddr("b2").String()) {
		t.Errorf("throttled %v under load, want the 3 writers (b3..b5), never the reader", h.during)
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
