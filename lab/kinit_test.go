package lab

import (
	"encoding/json"
	"strings"
	"testing"
)

// The kernel initiator's jobs run on the block device with libaio and
// O_DIRECT, one I/O in flight per thread; libiscsi's keep their engine
// and initiator name.
func TestJobFileBlockDevice(t *testing.T) {
	jobs := []Job{
		{Name: "w", Host: "b3", URL: "/dev/sdb", RW: "write", BS: 65536, NumJobs: 2, Runtime: 1e9},
		{Name: "r", Host: "b2", URL: `iscsi\://10.99.0.1\:3260/iqn.2026-11.lab\:vg1/1`, RW: "randread", BS: 8192, Runtime: 1e9},
	}
	kf, err := JobFile("b3", jobs, "/tmp/x")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ioengine=libaio\ndirect=1\nthread\n", "filename=/dev/sdb\n", "iodepth=1\n", "numjobs=2\n"} {
		if !strings.Contains(kf, want) {
			t.Errorf("kernel initiator's job file lacks %q:\n%s", want, kf)
		}
	}
	if strings.Contains(kf, "libiscsi") || strings.Contains(kf, "initiator=") {
		t.Errorf("kernel initiator's job file names libiscsi:\n%s", kf)
	}
	lf, err := JobFile("b2", jobs, "/tmp/x")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lf, "ioengine=libiscsi\nthread\ninitiator=iqn.2026-11.lab:b2\n") || strings.Contains(lf, "direct=1") {
		t.Errorf("libiscsi job file:\n%s", lf)
	}
}

func TestISCSIFieldsInSummary(t *testing.T) {
	b := withISCSIFields([]byte("{\n  \"experiment\": \"autonomic\"\n}"), Options{Target: TargetLIO, Initiator: InitiatorKernel})
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil || m["target"] != "lio" || m["initiator"] != "kernel" || m["experiment"] != "autonomic" {
		t.Errorf("%s: %v", b, err)
	}
	if !strings.HasPrefix(string(withISCSIFields([]byte("{}"), Options{})), "{\n  \"target\": \"tgt\",\n  \"initiator\": \"libiscsi\"\n") {
		t.Errorf("defaults: %s", withISCSIFields([]byte("{}"), Options{}))
	}
}

func TestOptionsTargetInitiator(t *testing.T) {
	o := DefaultOptions()
	if o.TargetKind() != "tgt" || o.InitiatorKind() != "libiscsi" || o.Validate() != nil {
		t.Errorf("defaults: %q %q %v", o.TargetKind(), o.InitiatorKind(), o.Validate())
	}
	o.Target, o.Initiator = "lio", "kernel"
	if err := o.Validate(); err != nil {
		t.Error(err)
	}
	o.Target = "scst"
	if o.Validate() == nil {
		t.Error("target scst accepted")
	}
	o.Target, o.Initiator = "lio", "iser"
	if o.Validate() == nil {
		t.Error("initiator iser accepted")
	}
	o.Target, o.Initiator = "nvmet", "kernel"
	if err := o.Validate(); err != nil {
		t.Error(err)
	}
	o.Initiator = "libiscsi"
	if o.Validate() == nil {
		t.Error("nvmet with libiscsi accepted")
	}
}

// Where a client's TCP counters are: its own namespace with libiscsi
// (whatever the target) and with the NVMe/TCP host, the initial one
// with the kernel's iSCSI initiator.
func TestClientTCPNS(t *testing.T) {
	for _, c := range []struct {
		name string
		s    *State
		want string
	}{
		{"no state", nil, "b2"},
		{"tgt, libiscsi (default)", &State{Options: DefaultOptions()}, "b2"},
		{"lio, libiscsi", &State{Options: Options{Target: TargetLIO, Initiator: InitiatorLibiscsi}}, "b2"},
		{"lio, kernel initiator", &State{Options: Options{Target: TargetLIO, Initiator: InitiatorKernel}}, ""},
		{"tgt, kernel initiator", &State{Options: Options{Initiator: InitiatorKernel}}, ""},
		{"nvmet, kernel host: each client's own", &State{Options: Options{Target: TargetNVMet, Initiator: InitiatorKernel}}, "b2"},
	} {
		if got := c.s.ClientTCPNS("b2"); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
