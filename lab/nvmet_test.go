package lab

import (
	"strings"
	"testing"
)

// Each client has its own NQN and host id (a UUID the kernel parses);
// the agent of an nvmet lab reads nvmet on the lab's second configfs
// mount and throttles port 4420.
func TestNVMeNames(t *testing.T) {
	if got := hostID("b2"); got != "5a9c0000-0000-4000-8000-0000000000b2" {
		t.Errorf("host id %q", got)
	}
	if HostNQN("b3") != "nqn.2026-11.lab:b3" || SubsystemNQN(Resource{Name: "vg1"}) != "nqn.2026-11.lab:vg1" {
		t.Error(HostNQN("b3"), SubsystemNQN(Resource{Name: "vg1"}))
	}
	y := (&State{Options: Options{Target: TargetNVMet, Initiator: InitiatorKernel}}).DiscoveryYAML(Target(0))
	for _, want := range []string{"iscsi_port: 4420\n", "source: nvmet\n", "root: /run/sanqos-lab/configfs/nvmet\n"} {
		if !strings.Contains(y, want) {
			t.Errorf("discovery YAML lacks %q:\n%s", want, y)
		}
	}
}
