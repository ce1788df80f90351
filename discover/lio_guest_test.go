package discover

import (
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
)

// testdata/lio-guest is LIO's configfs as the lab built it in the
// stock-kernel guest (Debian 6.1, `sanqos-lab lab up --kernel debian --target
// lio --initiator kernel`), copied file by file with its symlinks as the
// kernel made them (relative to the configfs mount) and the sessions'
// info as the kernel printed it: one target per resource, a TPG with one
// LUN per client on an iblock backstore (a loop device), one node ACL per
// client mapping its own LUN, each with a logged-in session from the
// client's own address (the kernel initiator's iface bound to sq-bX);
// the RAM LUN on fileio. Each TPG's portal, np/10.99.0.1:3260, is added
// as lab/lio.go makes it (the copy left np/ out).
func TestReadLIOCapturedInGuest(t *testing.T) {
	ts, err := ReadLIO(filepath.Join("testdata", "lio-guest", "target"))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		iqn, state string
		ports      []uint16
		luns       string
		sessions   string
	}
	var got []row
	for _, tg := range ts {
		r := row{iqn: tg.IQN, state: tg.State, ports: tg.Ports, luns: fmt.Sprint(tg.LUNs)}
		for _, s := range tg.Sessions {
			r.sessions += fmt.Sprintf("%s %v %v; ", s.Initiator, s.Addrs(), s.LUNs)
		}
		got = append(got, r)
	}
	want := []row{
		{"iqn.2026-11.lab:ram", "enabled", []uint16{3260}, "[{1 disk fileio /dev/shm/sanqos-lab/ram/b2.img }]",
			"iqn.2026-11.lab:b2 [10.99.0.2] [1]; "},
		{"iqn.2026-11.lab:vg1", "enabled", []uint16{3260},
			"[{1 disk iblock /dev/loop0 } {2 disk iblock /dev/loop1 } {3 disk iblock /dev/loop2 } {4 disk iblock /dev/loop3 }]",
			"iqn.2026-11.lab:b2 [10.99.0.2] [1]; iqn.2026-11.lab:b3 [10.99.0.3] [2]; iqn.2026-11.lab:b4 [10.99.0.4] [3]; iqn.2026-11.lab:b5 [10.99.0.5] [4]; "},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("targets\n got %+v\nwant %+v", got, want)
	}
	// Every client is a consumer of its own LUN's backing store.
	snap := BuildSnapshot(ts, nil)
	for i, dev := range []string{"/dev/loop0", "/dev/loop1", "/dev/loop2", "/dev/loop3"} {
		addrs := fmt.Sprint(snap.ConsumersOf(poolName([]string{"path:" + dev})))
		if want := fmt.Sprintf("[10.99.0.%d]", i+2); addrs != want {
			t.Errorf("consumers of %s: %s, want %s (problems %v)", dev, addrs, want, snap.Problems)
		}
	}
}
