package agent

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/discover"
)

// One tgt target with a LUN per initiator (the lab's layout): every
// initiator reaches every LUN, so without consumer_devices each consumer
// is measured on all four devices; with it, on its own.
func TestConsumerDevicesNarrowWhatAConsumerIsMeasuredOn(t *testing.T) {
	devs := []string{"loop0", "loop1", "loop2", "loop3"}
	var luns []discover.LUNRef
	for _, d := range devs {
		luns = append(luns, discover.LUNRef{Target: "iqn.2026-11.lab:vg1", Device: d})
	}
	b2, b3 := netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3")
	snap := discover.Snapshot{
		Resources: []discover.Resource{{Name: "pool", LUNs: luns, Devices: devs}},
		Consumers: []discover.Consumer{{Addr: b2, LUNs: luns}, {Addr: b3, LUNs: luns}},
	}
	for _, tc := range []struct {
		name   string
		narrow map[string][]string
		b2, b3 []string
	}{
		{"none: every reachable LUN", nil, devs, devs},
		{"b2 narrowed, b3 not", map[string][]string{"10.99.0.2": {"loop0"}}, []string{"loop0"}, devs},
		{"both", map[string][]string{"10.99.0.2": {"loop0"}, "10.99.0.3": {"loop1", "loop2"}}, []string{"loop0"}, []string{"loop1", "loop2"}},
		{"a device it cannot reach is not invented", map[string][]string{"10.99.0.2": {"sdz"}}, nil, devs},
	} {
		d := SnapshotDiscoverer{Resources: []config.Resource{{Name: "vg1", Devices: []string{"auto"}, ConsumerDevices: tc.narrow}},
			Snap: func() (discover.Snapshot, error) { return snap, nil }}
		topo, err := d.Discover()
		if err != nil {
			t.Fatal(err)
		}
		v := topo.Resources["vg1"]
		if got := v.Consumers[b2]; !reflect.DeepEqual(got, tc.b2) {
			t.Errorf("%s: b2 measured on %v, want %v", tc.name, got, tc.b2)
		}
		if got := v.Consumers[b3]; !reflect.DeepEqual(got, tc.b3) {
			t.Errorf("%s: b3 measured on %v, want %v", tc.name, got, tc.b3)
		}
	}
}

func TestStaticConsumerDevices(t *testing.T) {
	cfg := &config.Config{Resources: []config.Resource{{Name: "vg1", Devices: []string{"loop0", "loop1"},
		Throttleable: []string{"10.99.0.5"}, ConsumerDevices: map[string][]string{"10.99.0.2": {"loop0"}}}}}
	topo, _ := StaticDiscoverer(cfg).Discover()
	v := topo.Resources["vg1"]
	if got := v.Consumers[netip.MustParseAddr("10.99.0.2")]; !reflect.DeepEqual(got, []string{"loop0"}) {
		t.Errorf("10.99.0.2 measured on %v, want [loop0]", got)
	}
	if got, ok := v.Consumers[netip.MustParseAddr("10.99.0.5")]; !ok || got != nil {
		t.Errorf("static throttleable consumer: %v %v, want present without devices", got, ok)
	}
}
