package lab

import (
	"os"
	"reflect"
	"testing"
)

func TestParseRecord(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     *Record
	}{
		{"a whole lab", `lab 0123abcd 2026-11-29T08:29:10Z
builder 1571 114692 ./bar-sanqos lab up
netns sqlan 4026532177
netns bm 4026532246
supervisor 1649 114730 /tmp/x/bar-sanqos lab serve
loop loop0 /run/sanqos-lab/pool/vg1/b2.img
fuse /run/sanqos-lab/pool/vg1 0:39
tgtd 1670 114747 bm
etcd 1700 114800
complete
`, &Record{ID: "0123abcd", Complete: true,
			Builder:    Proc{1571, 114692, "./bar-sanqos lab up"},
			Supervisor: []Proc{{1649, 114730, "/tmp/x/bar-sanqos lab serve"}},
			Tgtd:       []Proc{{1670, 114747, "bm"}},
			Etcd:       []Proc{{1700, 114800, ""}},
			Netns:      map[string]uint64{"sqlan": 4026532177, "bm": 4026532246},
			Loops:      map[string]string{"loop0": "/run/sanqos-lab/pool/vg1/b2.img"},
			Fuse:       map[string]string{"/run/sanqos-lab/pool/vg1": "0:39"}}},
		{"cut short by a kill", "lab 77\ntgtd 16", &Record{ID: "77",
			Netns: map[string]uint64{}, Loops: map[string]string{}, Fuse: map[string]string{}}},
	} {
		got, err := parseRecord([]byte(tc.in))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: parseRecord = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := parseRecord([]byte("netns bm 1\n")); err == nil {
		t.Error("a record without the lab's id parsed")
	}
}

// A process is ours only with its start time: the same pid started at
// another time (a recycled pid) is not, and gets no signal.
func TestProcIdentity(t *testing.T) {
	self, err := procOf(os.Getpid())
	if err != nil || self.Start == 0 {
		t.Fatalf("procOf(self) = %+v, %v", self, err)
	}
	if !self.Alive() {
		t.Error("this process is not alive")
	}
	other := Proc{PID: self.PID, Start: self.Start + 1}
	if other.Alive() || other.signal(0) {
		t.Error("a recycled pid was taken for the recorded process")
	}
	if !self.signal(0) {
		t.Error("signal 0 to this process failed")
	}
	rec := &Record{Tgtd: []Proc{self}}
	if !rec.owns(self.PID) || rec.owns(self.PID+1) || (*Record)(nil).owns(self.PID) {
		t.Error("owns")
	}
}
