package agent

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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

// twoPools is a target with two pools: vg1's LUNs (loop0, loop1, used by
// b2) and vg2's (loop2, used by b3), each behind a target named after it.
func twoPools() discover.Snapshot {
	vg1 := []discover.LUNRef{{Target: "iqn.2026-11.lab:vg1", LUN: 1, Device: "loop0"}, {Target: "iqn.2026-11.lab:vg1", LUN: 2, Device: "loop1"}}
	vg2 := []discover.LUNRef{{Target: "iqn.2026-11.lab:vg2", LUN: 1, Device: "loop2"}}
	return discover.Snapshot{
		Resources: []discover.Resource{{Name: "sdb", LUNs: vg1, Devices: []string{"loop0", "loop1"}}, {Name: "sdc", LUNs: vg2, Devices: []string{"loop2"}}},
		Consumers: []discover.Consumer{{Addr: netip.MustParseAddr("10.99.0.2"), LUNs: vg1}, {Addr: netip.MustParseAddr("10.99.0.3"), LUNs: vg2}},
	}
}

// Each resource stands on its own: one that maps to nothing is named in
// Unmapped with the reason, and every other resource is still mapped.
func TestEachResourceMapsOnItsOwn(t *testing.T) {
	auto := []string{"auto"}
	onePool := discover.Snapshot{Resources: twoPools().Resources[:1], Consumers: twoPools().Consumers[:1]}
	filesOnly := discover.Snapshot{Resources: []discover.Resource{{Name: "path:/srv/lun1", LUNs: []discover.LUNRef{{Target: "iqn.x:vg1", Path: "/srv/lun1"}}}}}
	for _, tc := range []struct {
		name      string
		snap      discover.Snapshot
		resources []config.Resource
		mapped    map[string][]string // resource → devices
		unmapped  map[string]string   // resource → a word of the reason
	}{
		{"both good", twoPools(), []config.Resource{{Name: "vg1", Devices: auto}, {Name: "vg2", Devices: auto}},
			map[string][]string{"vg1": {"loop0", "loop1"}, "vg2": {"loop2"}}, nil},
		{"a typo beside a good one", twoPools(), []config.Resource{{Name: "vg1", Devices: auto}, {Name: "vg22", Devices: auto}},
			map[string][]string{"vg1": {"loop0", "loop1"}}, map[string]string{"vg22": "no discovered pool matches (found sdb, sdc"}},
		{"the typo first", twoPools(), []config.Resource{{Name: "gv1", Devices: auto}, {Name: "vg2", Devices: auto}},
			map[string][]string{"vg2": {"loop2"}}, map[string]string{"gv1": "no discovered pool matches"}},
		{"explicit devices are used as given", twoPools(), []config.Resource{{Name: "typo", Devices: auto}, {Name: "mine", Devices: []string{"sdz"}}},
			map[string][]string{"mine": {"sdz"}}, map[string]string{"typo": "no discovered pool"}},
		{"one auto resource, one pool: that pool, whatever its name", onePool, []config.Resource{{Name: "data", Devices: auto}},
			map[string][]string{"data": {"loop0", "loop1"}}, nil},
		{"two auto resources, one pool: only the named one", onePool, []config.Resource{{Name: "vg1", Devices: auto}, {Name: "data", Devices: auto}},
			map[string][]string{"vg1": {"loop0", "loop1"}}, map[string]string{"data": "found sdb;"}},
		{"a pool is one resource's", twoPools(), []config.Resource{{Name: "vg1", Devices: auto}, {Name: "lab:vg1", Devices: auto}},
			map[string][]string{"vg1": {"loop0", "loop1"}}, map[string]string{"lab:vg1": "pool sdb is already resource vg1's"}},
		{"no pool on the target", discover.Snapshot{}, []config.Resource{{Name: "vg1", Devices: auto}},
			map[string][]string{}, map[string]string{"vg1": "found none"}},
		{"a pool of plain files has nothing to measure", filesOnly, []config.Resource{{Name: "vg1", Devices: auto}},
			map[string][]string{}, map[string]string{"vg1": "no block device"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := tc.snap
			topo, err := SnapshotDiscoverer{Resources: tc.resources, Snap: func() (discover.Snapshot, error) { return snap, nil }}.Discover()
			if err != nil {
				t.Fatalf("a resource that maps to nothing failed the round: %v", err)
			}
			if len(topo.Resources) != len(tc.mapped) {
				t.Errorf("mapped %v, want %v", topo.Resources, tc.mapped)
			}
			for name, devs := range tc.mapped {
				if got := topo.Resources[name].Devices; !reflect.DeepEqual(got, devs) {
					t.Errorf("%s on %v, want %v", name, got, devs)
				}
			}
			if len(topo.Unmapped) != len(tc.unmapped) {
				t.Errorf("unmapped %v, want %v", topo.Unmapped, tc.unmapped)
			}
			for name, why := range tc.unmapped {
				if got, ok := topo.Unmapped[name]; !ok || !strings.Contains(got, why) {
					t.Errorf("%s unmapped because %q, want it to say %q", name, got, why)
				}
			}
		})
	}
}

// A mapped resource beside an unmapped one keeps its consumers, and the
// unmapped one has none: nothing is slowed on its behalf.
func TestUnmappedResourceHasNoConsumers(t *testing.T) {
	snap := twoPools()
	topo, _ := SnapshotDiscoverer{Resources: []config.Resource{{Name: "vg1", Devices: []string{"auto"}}, {Name: "vg9", Devices: []string{"auto"}}},
		Snap: func() (discover.Snapshot, error) { return snap, nil }}.Discover()
	if got := len(topo.Resources["vg1"].Consumers); got != 1 {
		t.Errorf("vg1 has %d consumers, want 1 (10.99.0.2)", got)
	}
	if _, ok := topo.Resources["vg9"]; ok {
		t.Error("unmapped vg9 has a view")
	}
}

// The log says each change of the mapping once: a round that changes
// nothing logs nothing.
func TestMappingChangesLoggedOnce(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	good := &Topology{Resources: map[string]ResourceView{"vg1": {Devices: []string{"loop0"}}}, Unmapped: map[string]string{"vg9": "no pool"}}
	same := &Topology{Resources: map[string]ResourceView{"vg1": {Devices: []string{"loop0"}}}, Unmapped: map[string]string{"vg9": "no pool"}}
	fixed := &Topology{Resources: map[string]ResourceView{"vg1": {Devices: []string{"loop0"}}, "vg9": {Devices: []string{"loop5"}}}}
	for _, tc := range []struct {
		name       string
		prev, next *Topology
		lines      int
		want       []string
	}{
		{"first round", nil, good, 2, []string{`level=WARN msg="resource unmapped`, `resource=vg9 reason="no pool"`, `msg="resource mapped" resource=vg1 devices=loop0`}},
		{"nothing changed", good, same, 0, nil},
		{"the typo fixed", same, fixed, 1, []string{`msg="resource mapped" resource=vg9 devices=loop5`}},
		{"a pool lost", fixed, good, 1, []string{`resource=vg9 reason="no pool"`}},
	} {
		buf.Reset()
		logMappingChanges(log, tc.prev, tc.next)
		if lines := strings.Count(buf.String(), "\n"); lines != tc.lines {
			t.Errorf("%s: %d lines, want %d:\n%s", tc.name, lines, tc.lines, buf.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(buf.String(), w) {
				t.Errorf("%s: log lacks %q:\n%s", tc.name, w, buf.String())
			}
		}
	}
}

// The log says which target software discovery reads (source auto: what
// it found) at the first round and when that changes, not every round.
func TestSourcesLoggedWhenTheyChange(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	tgt := &Topology{Sources: []string{"tgt"}}
	both := &Topology{Sources: []string{"tgt", "lio"}}
	for _, tc := range []struct {
		prev, next *Topology
		want       string
	}{
		{nil, tgt, `msg="discovery reads the target software found" sources=tgt`},
		{tgt, &Topology{Sources: []string{"tgt"}}, ""},
		{tgt, both, `sources=tgt,lio`},
	} {
		buf.Reset()
		logMappingChanges(log, tc.prev, tc.next)
		if got := buf.String(); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%v → %v: logged %q, want %q", tc.prev, tc.next.Sources, got, tc.want)
		}
	}
}

// nvmet may export on several TCP ports (the guest's fixture: 4420 and
// 4421), one host may serve iSCSI on 3260 beside, and tgtd may listen on
// a portal past 3260 (tgtadm's captured 3260 and 3261): the ports the
// agent does not throttle are the topology's Unthrottled, said in the
// log once per set, and exported one series each.
func TestUnthrottledPortsSaidOnce(t *testing.T) {
	testdata := filepath.Join("..", "discover", "testdata")
	n, err := discover.ReadNVMet(filepath.Join(testdata, "nvmet-guest", "nvmet"))
	if err != nil {
		t.Fatal(err)
	}
	tgt, err := discover.ReadTgt(0, func(args ...string) ([]byte, error) {
		return os.ReadFile(filepath.Join(testdata, map[string]string{"target": "tgtadm-nosessions.txt", "portal": "tgtadm-portal-3261.txt"}[args[len(args)-1]]))
	})
	if err != nil {
		t.Fatal(err)
	}
	snaps := map[string]discover.Snapshot{"nvmet": discover.BuildSnapshot(n.Subsystems, nil), "tgt": discover.BuildSnapshot(tgt, nil)}
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var prev *Topology
	for _, tc := range []struct {
		source      string
		ports, want []uint16
		logged      bool
	}{
		{"nvmet", []uint16{4420}, []uint16{4421}, true},
		{"nvmet", []uint16{4420}, []uint16{4421}, false}, // the same set: said already
		{"nvmet", []uint16{4421}, []uint16{4420}, true},
		{"nvmet", []uint16{3260}, []uint16{4420, 4421}, true}, // iSCSI's port: nvmet's hosts are all unthrottled
		{"nvmet", []uint16{4420, 4421}, nil, false},
		{"tgt", []uint16{3260}, []uint16{3261}, true}, // an iSCSI portal past the agent's ports
		{"tgt", []uint16{3260, 4420}, []uint16{3261}, false},
		{"tgt", []uint16{3260, 3261}, nil, false},
	} {
		snap := snaps[tc.source]
		d := SnapshotDiscoverer{Ports: tc.ports, Snap: func() (discover.Snapshot, error) { return snap, nil }}
		topo, err := d.Discover()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(topo.Unthrottled, tc.want) {
			t.Errorf("%s, throttling %v: unthrottled %v, want %v", tc.source, tc.ports, topo.Unthrottled, tc.want)
		}
		buf.Reset()
		logMappingChanges(log, prev, topo)
		prev = topo
		said := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), "ports=") && strings.Contains(buf.String(), fmt.Sprint(tc.want))
		if said != tc.logged {
			t.Errorf("throttling %v: logged %v, want %v:\n%s", tc.ports, said, tc.logged, buf.String())
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(portsCollector{func() []uint16 { return topo.Unthrottled }})
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var series []string
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				series = append(series, fmt.Sprintf("%s{port=%s} %g", mf.GetName(), m.GetLabel()[0].GetValue(), m.GetGauge().GetValue()))
			}
		}
		var want []string
		for _, p := range tc.want {
			want = append(want, fmt.Sprintf("sanqos_unthrottled_port{port=%d} 1", p))
		}
		if !slices.Equal(series, want) {
			t.Errorf("throttling %v: metrics %q, want %q", tc.ports, series, want)
		}
	}
}
