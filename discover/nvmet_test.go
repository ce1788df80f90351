package discover

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// testdata/nvmet-guest is nvmet's configfs as the stock-kernel guest's
// kernel (Debian 6.1, nvmet and nvmet-tcp) built it, copied file by file
// with its symlinks as the kernel made them: subsystem vg1 open to any
// host with two namespaces on loop devices, subsystem ram open to host b3
// only with namespace 7 enabled and 8 (a plain file) not, port 1 on
// 127.0.0.1:4420 exporting both, port 2 on [::1]:4421 exporting vg1; b2
// connected to vg1 with two I/O queues and b3 to ram with one while it
// was copied.
func TestReadNVMetCapturedInGuest(t *testing.T) {
	n, err := ReadNVMet(filepath.Join("testdata", "nvmet-guest", "nvmet"))
	if err != nil {
		t.Fatal(err)
	}
	var subs []string
	for _, s := range n.Subsystems {
		subs = append(subs, fmt.Sprintf("%s acl=%v luns=%v sessions=%d", s.IQN, s.ACL, s.LUNs, len(s.Sessions)))
	}
	want := []string{
		"nqn.2026-11.lab:ram acl=[nqn.2026-11.lab:b3] luns=[{7 disk  /dev/loop2 }] sessions=0",
		"nqn.2026-11.lab:vg1 acl=[ALL] luns=[{1 disk  /dev/loop0 } {2 disk  /dev/loop1 }] sessions=0",
	}
	if !reflect.DeepEqual(subs, want) {
		t.Errorf("subsystems:\n got %q\nwant %q", subs, want)
	}
	wantPorts := []NVMePort{
		{ID: 1, Transport: "tcp", Family: "ipv4", Addr: "127.0.0.1", Service: "4420", Subsystems: []string{"nqn.2026-11.lab:ram", "nqn.2026-11.lab:vg1"}},
		{ID: 2, Transport: "tcp", Family: "ipv6", Addr: "::1", Service: "4421", Subsystems: []string{"nqn.2026-11.lab:vg1"}},
	}
	if !reflect.DeepEqual(n.Ports, wantPorts) {
		t.Errorf("ports:\n got %+v\nwant %+v", n.Ports, wantPorts)
	}
	// Each subsystem's TCP ports, and the snapshot's: all of them, which
	// the agent compares with the ports it throttles.
	for _, s := range n.Subsystems {
		want := map[string][]uint16{"nqn.2026-11.lab:ram": {4420}, "nqn.2026-11.lab:vg1": {4420, 4421}}[s.IQN]
		if !reflect.DeepEqual(s.Ports, want) {
			t.Errorf("%s: ports %v, want %v", s.IQN, s.Ports, want)
		}
	}
	if p := BuildSnapshot(n.Subsystems, nil).Ports; !reflect.DeepEqual(p, []uint16{4420, 4421}) {
		t.Errorf("snapshot ports %v, want [4420 4421]", p)
	}
}

// A host without nvmet (module not loaded, configfs not mounted) and a
// tree the kernel would not build are errors that say so, not an empty
// target.
func TestReadNVMetErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"no nvmet", nil, "subsystems"},
		{"no ports dir", map[string]string{"subsystems/": ""}, "ports"},
		{"subsystem without attr", map[string]string{"subsystems/nqn.x/namespaces/": "", "ports/": ""}, "attr_allow_any_host"},
		{"namespace without device_path", map[string]string{
			"subsystems/nqn.x/attr_allow_any_host": "1\n", "subsystems/nqn.x/namespaces/1/enable": "1\n", "ports/": ""}, "device_path"},
		{"port without trtype", map[string]string{"subsystems/": "", "ports/1/subsystems/": ""}, "addr_trtype"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "nvmet")
			for p, body := range tc.files {
				full := filepath.Join(root, p)
				if strings.HasSuffix(p, "/") {
					if err := os.MkdirAll(full, 0o755); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ReadNVMet(root)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nvmet") {
				t.Errorf("err = %v, want one naming nvmet and %q", err, tc.want)
			}
		})
	}
}

// Hosts come from the target's sockets on a port, with the subsystem
// each Connect named where the wire showed it: a host's queues are one
// session, a host on two subsystems is in both, a connection whose
// Connect was not seen goes to every subsystem of its port, unconfirmed
// where there are several.
func TestNVMetWithHosts(t *testing.T) {
	n, err := ReadNVMet(filepath.Join("testdata", "nvmet-guest", "nvmet"))
	if err != nil {
		t.Fatal(err)
	}
	const vg1, ram = "nqn.2026-11.lab:vg1", "nqn.2026-11.lab:ram"
	p1, p2 := netip.MustParseAddrPort("127.0.0.1:4420"), netip.MustParseAddrPort("[::1]:4421")
	conn := func(local netip.AddrPort, peer string, sub string) NVMeConn {
		c := NVMeConn{Local: local, Peer: netip.MustParseAddrPort(peer), SubNQN: sub}
		if sub != "" {
			c.HostNQN = "nqn.2026-11.lab:" + strings.Split(peer, ":")[0]
		}
		return c
	}
	for _, tc := range []struct {
		name  string
		conns []NVMeConn
		want  map[string][]string // subsystem → "initiator/alias/conns"
	}{
		{"one host, admin and four I/O queues: one session", []NVMeConn{
			conn(p1, "10.0.0.2:1", vg1), conn(p1, "10.0.0.2:2", vg1), conn(p1, "10.0.0.2:3", vg1), conn(p1, "10.0.0.2:4", vg1), conn(p1, "10.0.0.2:5", vg1),
		}, map[string][]string{vg1: {"nqn.2026-11.lab:10.0.0.2//5"}}},
		{"a host on two subsystems is in both", []NVMeConn{
			conn(p1, "10.0.0.3:1", vg1), conn(p1, "10.0.0.3:2", ram), conn(p1, "10.0.0.2:9", ram),
		}, map[string][]string{vg1: {"nqn.2026-11.lab:10.0.0.3//1"}, ram: {"nqn.2026-11.lab:10.0.0.3//1", "nqn.2026-11.lab:10.0.0.2//1"}}},
		{"no Connect seen: every subsystem of the port, unconfirmed", []NVMeConn{
			conn(p1, "10.0.0.4:1", ""),
		}, map[string][]string{vg1: {"host at 10.0.0.4/unconfirmed/1"}, ram: {"host at 10.0.0.4/unconfirmed/1"}}},
		{"no Connect seen on a port of one subsystem: sure", []NVMeConn{
			conn(p2, "[fd00::5]:1", ""),
		}, map[string][]string{vg1: {"host at fd00::5//1"}}},
		{"a Connect confirms the guess of a sibling queue", []NVMeConn{
			conn(p1, "10.0.0.4:1", ""), conn(p1, "10.0.0.4:2", vg1),
		}, map[string][]string{vg1: {"nqn.2026-11.lab:10.0.0.4//2"}, ram: {"host at 10.0.0.4/unconfirmed/1"}}},
		{"another port or address is not the target's", []NVMeConn{
			conn(netip.MustParseAddrPort("127.0.0.1:3260"), "10.0.0.2:1", ""), conn(netip.MustParseAddrPort("127.0.0.2:4420"), "10.0.0.2:1", ""),
		}, map[string][]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string][]string{}
			for _, tg := range n.WithHosts(tc.conns) {
				for _, s := range tg.Sessions {
					got[tg.IQN] = append(got[tg.IQN], fmt.Sprintf("%s/%s/%d", s.Initiator, s.Alias, len(s.Conns)))
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
	if s := n.TCPServices(); !reflect.DeepEqual(s, []uint16{4420, 4421}) {
		t.Errorf("services %v", s)
	}
}

// BuildSnapshot makes one consumer of a host on two subsystems on two
// resources, in both resources' consumer sets.
func TestNVMetHostOnTwoResources(t *testing.T) {
	n := NVMet{Subsystems: []Target{
		{IQN: "nqn.a", LUNs: []LUN{{Number: 1, Type: "disk", Path: "/dev/a"}}},
		{IQN: "nqn.b", LUNs: []LUN{{Number: 1, Type: "disk", Path: "/dev/b"}}},
	}, Ports: []NVMePort{{ID: 1, Transport: "tcp", Addr: "0.0.0.0", Service: "4420", Subsystems: []string{"nqn.a", "nqn.b"}}}}
	local := netip.MustParseAddrPort("10.99.0.1:4420")
	var conns []NVMeConn
	for q := range 5 { // admin and four I/O queues to each
		for _, sub := range []string{"nqn.a", "nqn.b"} {
			conns = append(conns, NVMeConn{Local: local, Peer: netip.AddrPortFrom(netip.MustParseAddr("10.99.0.3"), uint16(40000+q)), HostNQN: "nqn.h3", SubNQN: sub})
		}
	}
	conns = append(conns, NVMeConn{Local: local, Peer: netip.MustParseAddrPort("10.99.0.2:1"), HostNQN: "nqn.h2", SubNQN: "nqn.a"})
	snap := BuildSnapshot(n.WithHosts(conns), nil)
	want := map[string][]netip.Addr{
		"path:/dev/a": {netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3")},
		"path:/dev/b": {netip.MustParseAddr("10.99.0.3")},
	}
	if !reflect.DeepEqual(snap.Map, want) || len(snap.Consumers) != 2 {
		t.Fatalf("map %v, consumers %+v", snap.Map, snap.Consumers)
	}
}
