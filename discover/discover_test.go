package discover

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/testenv"
)

func read(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	v4lo = netip.MustParseAddr("127.0.0.1")
	v6lo = netip.MustParseAddr("::1")
)

// Fixtures captured from a real tgtd 1.0.85 (Debian's tgt) on a scratch
// instance (-C 77, portals 127.0.0.1:3263 and [::1]:3263), with libiscsi's
// iscsi-perf holding sessions open while tgtadm ran.
func TestParseTgtadmFixtures(t *testing.T) {
	type sess struct {
		tid       int
		initiator string
		addr      netip.Addr
	}
	tests := []struct {
		file     string
		targets  int
		sessions []sess
		paths    map[int][]string // tid → data LUN paths
	}{
		{"tgtadm-empty.txt", 0, nil, nil},
		{"tgtadm-nosessions.txt", 2, nil, map[int][]string{1: {"/tmp/sqfx/lun1.img", "/tmp/sqfx/lun2.img"}, 2: {"/tmp/sqfx/lun2.img"}}},
		{"tgtadm-sessions.txt", 3, []sess{
			{1, "iqn.2026-11.lab:b2", v4lo}, {1, "iqn.2026-11.lab:b3", v4lo}, {3, "iqn.2026-11.lab:b3", v4lo},
		}, map[int][]string{3: {"/dev/loop4"}}},
		{"tgtadm-ipv6.txt", 3, []sess{
			{1, "iqn.2026-11.lab:b4", v6lo}, {1, "iqn.2026-11.lab:b2", v4lo}, {3, "iqn.2026-11.lab:b5", v6lo},
		}, nil},
		{"tgtadm-account.txt", 3, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			ts, err := ParseTgtadm(read(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if len(ts) != tc.targets {
				t.Fatalf("%d targets, want %d", len(ts), tc.targets)
			}
			var got []sess
			for _, tg := range ts {
				if tg.State != "ready" {
					t.Errorf("target %d state %q", tg.TID, tg.State)
				}
				for _, s := range tg.Sessions {
					if len(s.Conns) != 1 || s.Alias != "" {
						t.Errorf("session %+v: want one connection, no alias", s)
					}
					for _, a := range s.Addrs() {
						got = append(got, sess{tg.TID, s.Initiator, a})
					}
				}
				if want, ok := tc.paths[tg.TID]; ok {
					var paths []string
					for _, l := range tg.DataLUNs() {
						paths = append(paths, l.Path)
					}
					if !reflect.DeepEqual(paths, want) {
						t.Errorf("tid %d paths %v, want %v", tg.TID, paths, want)
					}
				}
			}
			if tc.sessions != nil && !reflect.DeepEqual(got, tc.sessions) {
				t.Errorf("sessions %v, want %v", got, tc.sessions)
			}
		})
	}
}

func TestParseTgtadmDetails(t *testing.T) {
	ts, err := ParseTgtadm(read(t, "tgtadm-account.txt"))
	if err != nil {
		t.Fatal(err)
	}
	idle := ts[1]
	if idle.IQN != "iqn.2026-11.lab:idle" || !reflect.DeepEqual(idle.Accounts, []string{"alice", "alice (outgoing)"}) ||
		!reflect.DeepEqual(idle.ACL, []string{"127.0.0.1"}) {
		t.Errorf("target 2: %+v", idle)
	}
	l := ts[0].LUNs
	want := []LUN{
		{Number: 0, Type: "controller", BackingType: "null"},
		{Number: 1, Type: "disk", BackingType: "rdwr", Path: "/tmp/sqfx/lun1.img", Flags: "direct"},
		{Number: 2, Type: "disk", BackingType: "rdwr", Path: "/tmp/sqfx/lun2.img"},
	}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("LUNs\n got %+v\nwant %+v", l, want)
	}
}

func TestParseTgtadmErrors(t *testing.T) {
	tests := []struct{ name, in string }{
		{"text before target", "    LUN information:\n"},
		{"bad tid", "Target x: iqn.a:b\n"},
		{"no iqn", "Target 1: \n"},
		{"bad nexus", "Target 1: iqn.a:b\n    I_T nexus information:\n        I_T nexus: -1\n"},
		{"address without connection", "Target 1: iqn.a:b\n    I_T nexus information:\n        I_T nexus: 1\n                IP Address: 10.0.0.1\n"},
		{"bad address", "Target 1: iqn.a:b\n    I_T nexus information:\n        I_T nexus: 1\n            Connection: 0\n                IP Address: 10.0.0.300\n"},
		{"initiator without nexus", "Target 1: iqn.a:b\n    I_T nexus information:\n            Initiator: iqn.x:y alias: none\n"},
		{"LUN field first", "Target 1: iqn.a:b\n    LUN information:\n            Backing store path: /x\n"},
		{"bad LUN", "Target 1: iqn.a:b\n    LUN information:\n        LUN: x\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseTgtadm([]byte(tc.in)); !errors.Is(err, ErrSyntax) {
				t.Errorf("err = %v, want ErrSyntax", err)
			}
		})
	}
}

// A hand-made multi-connection session (MC/S; libiscsi cannot open one) in
// tgt's format, plus an iSER address line.
func TestParseTgtadmMultiConnection(t *testing.T) {
	in := "Target 1: iqn.a:b\n    System information:\n        Driver: iscsi\n        State: ready\n" +
		"    I_T nexus information:\n        I_T nexus: 7\n            Initiator: iqn.x:y alias: host-y\n" +
		"            Connection: 0\n                IP Address: 192.0.2.1\n" +
		"            Connection: 1\n                RDMA IP Address: 192.0.2.2\n"
	ts, err := ParseTgtadm([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	s := ts[0].Sessions[0]
	want := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")}
	if s.ID != 7 || s.Alias != "host-y" || !reflect.DeepEqual(s.Addrs(), want) {
		t.Errorf("%+v", s)
	}
}

func TestParseIET(t *testing.T) {
	ts, err := ParseIET(read(t, "iet-session.txt"), read(t, "iet-volume.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 3 {
		t.Fatalf("%d targets", len(ts))
	}
	b2 := ts[1]
	if b2.TID != 1 || b2.IQN != "iqn.iscsilab:perc_b2" || len(b2.Sessions) != 1 {
		t.Fatalf("%+v", b2)
	}
	wantAddrs := []netip.Addr{netip.MustParseAddr("10.0.0.242"), netip.MustParseAddr("fe80::216:3eff:fe12:3456")}
	if got := b2.Sessions[0].Addrs(); !reflect.DeepEqual(got, wantAddrs) {
		t.Errorf("addrs %v", got)
	}
	if b2.Sessions[0].ID != 562949974196736 || b2.Sessions[0].Conns[0].State != "active" {
		t.Errorf("%+v", b2.Sessions[0])
	}
	if l := b2.LUNs[0]; l.Path != "/dev/vg_perc/lv_b2" || l.BackingType != "fileio" || l.Flags != "wt" {
		t.Errorf("%+v", l)
	}
	if p := ts[2].LUNs[0].Path; p != "/srv/images/idle disk.img" {
		t.Errorf("path with a space: %q", p)
	}
	if len(ts[2].Sessions) != 0 {
		t.Errorf("idle target has sessions")
	}
}

func TestParseIETErrors(t *testing.T) {
	tests := []struct{ name, sess, vol string }{
		{"session before tid", "\tsid:1 initiator:x\n", ""},
		{"conn before session", "tid:1 name:a\n\t\tcid:0 ip:1.2.3.4 state:active\n", ""},
		{"bad sid", "tid:1 name:a\n\tsid:x initiator:y\n", ""},
		{"bad tid", "tid:x name:a\n", ""},
		{"no name", "tid:1\n", ""},
		{"bad lun", "", "tid:1 name:a\n\tlun:-1 path:/x\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseIET([]byte(tc.sess), []byte(tc.vol)); !errors.Is(err, ErrSyntax) {
				t.Errorf("err = %v", err)
			}
		})
	}
	// The kernel's own fallback for an unknown address family is kept,
	// address-less, not an error.
	ts, err := ParseIET([]byte("tid:1 name:a\n\tsid:1 initiator:x\n\t\tcid:0 ip:Unknown family 40 state:active hd:none dd:none\n"), nil)
	if err != nil || len(ts[0].Sessions[0].Conns) != 1 || ts[0].Sessions[0].Conns[0].Addr.IsValid() {
		t.Errorf("%+v %v", ts, err)
	}
}

func TestReadLIO(t *testing.T) {
	ts, err := ReadLIO(filepath.Join("testdata", "lio", "target"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 {
		t.Fatalf("%d targets", len(ts))
	}
	tg := ts[0]
	// Its portals: np/0.0.0.0:3260 and np/[::]:3261.
	if tg.IQN != "iqn.2003-01.org.linux-iscsi.lab:vg1" || tg.TID != 1 || tg.State != "enabled" || !reflect.DeepEqual(tg.Ports, []uint16{3260, 3261}) {
		t.Errorf("%+v", tg)
	}
	wantLUNs := []LUN{
		{Number: 0, Type: "disk", BackingType: "iblock", Path: "/dev/loop3"},
		{Number: 1, Type: "disk", BackingType: "fileio", Path: "/srv/img2.raw"},
	}
	if !reflect.DeepEqual(tg.LUNs, wantLUNs) {
		t.Errorf("LUNs %+v", tg.LUNs)
	}
	type row struct {
		init  string
		addrs string
		luns  []int
	}
	var got []row
	for _, s := range tg.Sessions {
		got = append(got, row{s.Initiator, fmt.Sprint(s.Addrs()), s.LUNs})
	}
	want := []row{
		{"iqn.2026-11.lab:b2", "[10.99.0.2]", []int{0}},
		{"iqn.2026-11.lab:b3", "[fd00:99::3 10.99.0.3]", []int{1}},
		{"iqn.2026-11.lab:b5", "[]", nil}, // dynamic: name only
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sessions\n got %v\nwant %v", got, want)
	}
	if _, err := ReadLIO(t.TempDir()); err == nil {
		t.Error("a root without iscsi/ must be an error")
	}
	bad := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bad, "iscsi", "iqn.a:b", "tpgt_1", "np", "10.0.0.1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLIO(bad); !errors.Is(err, ErrSyntax) {
		t.Errorf("an np without a port: err = %v, want ErrSyntax", err)
	}
}

func TestParseLIOInfoErrors(t *testing.T) {
	for _, in := range []string{
		"InitiatorName: x\nLIO Session ID: x   ISID: 0x00\n",
		"InitiatorName: x\n   Address 10.0.0.1 TCP\n",
		"InitiatorName: x\nCID: 0  Connection State: X\n   Address 10.0.0 TCP\n",
		"CID: 99999999  Connection State: X\n",
	} {
		if _, _, err := ParseLIOInfo([]byte(in)); !errors.Is(err, ErrSyntax) {
			t.Errorf("%q: err = %v", in, err)
		}
	}
}

// fakeSys builds a sysfs tree: loop3 and loop10 backed by files on a FUSE
// filesystem (no block device), loop4 by a file on partition vda1, dm-0 on
// sdb+sdc (a striped LV), md0 on sdd+sde.
type fakeSys struct {
	root  string
	stats map[string]FileDev
}

func dev(maj, min uint32) uint64 { return unix.Mkdev(maj, min) }

func newFakeSys(t *testing.T) *fakeSys {
	t.Helper()
	root := t.TempDir()
	f := &fakeSys{root: root, stats: map[string]FileDev{}}
	mk := func(p, content string) {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(p, dst string) {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(dst, p); err != nil {
			t.Fatal(err)
		}
	}
	block := func(name string, maj, min uint32, parent string) {
		d := "devices/virtual/block/" + name
		if parent != "" {
			d = "devices/pci/block/" + parent + "/" + name
			mk(d+"/partition", "1\n")
		}
		mk(d+"/dev", fmt.Sprintf("%d:%d\n", maj, min))
		link(fmt.Sprintf("dev/block/%d:%d", maj, min), "../../"+d)
		link("class/block/"+name, "../../"+d)
		if parent == "" {
			link("block/"+name, "../"+d)
		}
	}
	for _, b := range []struct {
		name     string
		maj, min uint32
		parent   string
	}{
		{"loop3", 7, 3, ""}, {"loop4", 7, 4, ""}, {"loop10", 7, 10, ""}, {"vda", 253, 0, ""}, {"vda1", 253, 1, "vda"},
		{"dm-0", 252, 0, ""}, {"sdb", 8, 16, ""}, {"sdc", 8, 32, ""}, {"md0", 9, 0, ""}, {"sdd", 8, 48, ""}, {"sde", 8, 64, ""},
	} {
		block(b.name, b.maj, b.min, b.parent)
	}
	mk("devices/virtual/block/loop3/loop/backing_file", "/mnt/fuse/lun1.img\n")
	mk("devices/virtual/block/loop10/loop/backing_file", "/mnt/fuse/lun2.img (deleted)\n")
	mk("devices/virtual/block/loop4/loop/backing_file", "/var/lib/lun3.img\n")
	mk("devices/virtual/block/dm-0/slaves/sdb", "")
	mk("devices/virtual/block/dm-0/slaves/sdc", "")
	mk("devices/virtual/block/md0/slaves/sdd", "")
	mk("devices/virtual/block/md0/slaves/sde", "")
	fuse := dev(0, 53)
	f.stats = map[string]FileDev{
		"/mnt/fuse/lun1.img":  {Dev: fuse},
		"/mnt/fuse/lun2.img":  {Dev: fuse},
		"/mnt/fuse/plain.img": {Dev: fuse},
		"/var/lib/lun3.img":   {Dev: dev(253, 1)},
		"/var/lib/plain.img":  {Dev: dev(253, 1)},
		"/dev/loop3":          {Block: true, Rdev: dev(7, 3)},
		"/dev/vg/lv":          {Block: true, Rdev: dev(252, 0)},
		"/dev/md0":            {Block: true, Rdev: dev(9, 0)},
		"/dev/sdz":            {Block: true, Rdev: dev(8, 240)},
	}
	return f
}

func (f *fakeSys) resolver() *Resolver {
	return &Resolver{SysRoot: f.root, Stat: func(p string) (FileDev, error) {
		if st, ok := f.stats[p]; ok {
			return st, nil
		}
		return FileDev{}, os.ErrNotExist
	}}
}

func TestResolve(t *testing.T) {
	r := newFakeSys(t).resolver()
	tests := []struct {
		path    string
		want    BlockDev
		wantErr error
	}{
		{"/dev/loop3", BlockDev{"loop3", []string{"dev-0:53"}}, nil},
		{"/mnt/fuse/lun1.img", BlockDev{"loop3", []string{"dev-0:53"}}, nil},
		{"/mnt/fuse/lun2.img", BlockDev{"loop10", []string{"dev-0:53"}}, nil}, // " (deleted)" stripped
		{"/var/lib/lun3.img", BlockDev{"loop4", []string{"vda"}}, nil},        // partition → whole disk
		{"/var/lib/plain.img", BlockDev{"", []string{"vda"}}, nil},            // no loop: only the fs device
		{"/mnt/fuse/plain.img", BlockDev{"", []string{"dev-0:53"}}, nil},
		{"/dev/vg/lv", BlockDev{"dm-0", []string{"sdb", "sdc"}}, nil},
		{"/dev/md0", BlockDev{"md0", []string{"sdd", "sde"}}, nil},
		{"/dev/sdz", BlockDev{}, ErrNotFound},
		{"/nonexistent", BlockDev{}, os.ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			got, err := r.Resolve(tc.path)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// The real machine: /dev/loop0 always exists here, as does /sys.
func TestResolveRealSysfs(t *testing.T) {
	if _, err := os.Stat("/sys/block/loop0"); err != nil {
		testenv.Missing(t, "no loop0 in /sys/block (run scripts/setup.sh)")
	}
	bd, err := (&Resolver{}).Resolve("/dev/loop0")
	if err != nil || bd.Name != "loop0" {
		t.Fatalf("got %+v, %v", bd, err)
	}
}

func TestBuildSnapshot(t *testing.T) {
	r := newFakeSys(t).resolver()
	a2, a3, a4 := netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3"), netip.MustParseAddr("10.99.0.4")
	conn := func(a netip.Addr) []Conn { return []Conn{{Addr: a}} }
	targets := []Target{
		{TID: 1, IQN: "iqn.lab:vg1", LUNs: []LUN{{Number: 0, Type: "controller"}, {Number: 1, Path: "/dev/loop3"}, {Number: 2, Path: "/mnt/fuse/lun2.img"}},
			Sessions: []Session{{Initiator: "iqn.lab:b2", Conns: conn(a2)}, {Initiator: "iqn.lab:b3", Conns: conn(a3)}}},
		{TID: 2, IQN: "iqn.lab:lv", LUNs: []LUN{{Number: 1, Path: "/dev/vg/lv"}},
			Sessions: []Session{{Initiator: "iqn.lab:b3", Conns: conn(a3)}, {Initiator: "iqn.lab:b9"}}},
		{TID: 3, IQN: "iqn.lab:acl", LUNs: []LUN{{Number: 0, Path: "/dev/md0"}, {Number: 1, Path: "/var/lib/lun3.img"}},
			Sessions: []Session{{Initiator: "iqn.lab:b4", Conns: conn(a4), LUNs: []int{1}}}},
		{TID: 4, IQN: "iqn.lab:broken", LUNs: []LUN{{Number: 1, Path: "/gone"}}},
	}
	s := BuildSnapshot(targets, r)
	var names []string
	for _, res := range s.Resources {
		names = append(names, fmt.Sprintf("%s%v", res.Name, res.Devices))
	}
	wantRes := []string{"dev-0:53[loop10 loop3]", "path:/gone[]", "sdb+sdc[dm-0]", "sdd+sde[md0]", "vda[loop4]"}
	if !reflect.DeepEqual(names, wantRes) {
		t.Errorf("resources %v\nwant %v", names, wantRes)
	}
	wantMap := map[string][]netip.Addr{
		"dev-0:53": {a2, a3},
		"sdb+sdc":  {a3},
		"vda":      {a4}, // ACL maps only LUN 1: md0 is not b4's
	}
	if !reflect.DeepEqual(s.Map, wantMap) {
		t.Errorf("map %v\nwant %v", s.Map, wantMap)
	}
	if len(s.Consumers) != 3 || !reflect.DeepEqual(s.Consumers[1].Resources, []string{"dev-0:53", "sdb+sdc"}) {
		t.Errorf("consumers %+v", s.Consumers)
	}
	if len(s.Problems) != 2 || !strings.Contains(strings.Join(s.Problems, "\n"), "iqn.lab:b9") {
		t.Errorf("problems %q", s.Problems)
	}
	if !slices.Equal(s.ConsumersOf("sdb+sdc"), []netip.Addr{a3}) {
		t.Error("ConsumersOf")
	}
}

// The real tgt fixture end to end, without block resolution.
func TestSnapshotFromTgtFixture(t *testing.T) {
	ts, err := ParseTgtadm(read(t, "tgtadm-ipv6.txt"))
	if err != nil {
		t.Fatal(err)
	}
	s := BuildSnapshot(ts, nil)
	if len(s.Consumers) != 2 || s.Consumers[0].Addr != v4lo || s.Consumers[1].Addr != v6lo {
		t.Fatalf("consumers %+v", s.Consumers)
	}
	if got := s.ConsumersOf("path:/dev/loop4"); !slices.Equal(got, []netip.Addr{v6lo}) {
		t.Errorf("loop4 consumers %v", got)
	}
}
