package main

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/capture"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/passive"
)

// The bridge discoverer reports every initiator seen on a resource's
// portals, each with its own pseudo-device, and the config's portals build
// the meter (port defaulting to iscsi_port, or 4420 for nvme-tcp, whose
// protocol the meter gets; the capture takes every portal's port).
func TestBridgeDiscover(t *testing.T) {
	cfg, err := config.Parse([]byte("mode: bridge\ncapture_interface: p-bm\niscsi_port: 3261\nresources:\n  - name: a\n    portals: [10.0.0.1]\n  - name: b\n    portals: [\"10.0.0.2:3260\"]\n  - name: c\n    portals: [10.0.0.2]\n    protocol: nvme-tcp\n"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := bridgeResources(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Portals[0].String() != "10.0.0.1:3261" || rs[1].Portals[0].String() != "10.0.0.2:3260" ||
		rs[2].Portals[0].String() != "10.0.0.2:4420" || rs[2].Protocol != passive.NVMeTCP || rs[0].Protocol != "" {
		t.Fatalf("portals %+v", rs)
	}
	if ps := passive.Ports(rs); !slices.Equal(ps, []uint16{3261, 3260, 4420}) {
		t.Fatalf("capture ports %v", ps)
	}
	m, err := passive.NewMeter(rs)
	if err != nil {
		t.Fatal(err)
	}
	cmd := make([]byte, 48)
	cmd[0], cmd[1], cmd[32] = 0x01, 0xc0, 0x28
	binary.BigEndian.PutUint32(cmd[16:], 1)
	for _, src := range []string{"10.0.0.7:5000", "10.0.0.8:5000"} {
		m.Segment(capture.Segment{Src: netip.MustParseAddrPort(src), Dst: rs[0].Portals[0], Payload: cmd, Time: time.Now()})
	}
	topo, err := (&bridgeInputs{meter: m}).Discover()
	if err != nil {
		t.Fatal(err)
	}
	a := topo.Resources["a"]
	if len(a.Devices) != 2 || len(a.Consumers) != 2 || a.Consumers[netip.MustParseAddr("10.0.0.7")][0] != passive.DeviceName("a", netip.MustParseAddr("10.0.0.7")) {
		t.Fatalf("resource a: %+v", a)
	}
	if b, ok := topo.Resources["b"]; !ok || len(b.Consumers) != 0 {
		t.Fatalf("resource b: %+v", b)
	}
	other := *cfg
	other.Resources = append([]config.Resource(nil), cfg.Resources...)
	other.Resources[1].Portals = []string{"10.0.0.3"}
	proto := *cfg
	proto.Resources = append([]config.Resource(nil), cfg.Resources...)
	proto.Resources[2].Protocol = "iscsi"
	if samePortals(cfg, &other) || samePortals(cfg, &proto) || !samePortals(cfg, cfg) {
		t.Fatal("samePortals")
	}
}
