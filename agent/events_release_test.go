package agent

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/discover"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// busyPools is two pools, vg1 on loop0+loop1 and vg2 on loop2+loop3,
// each with a reader on its first device and a writer on its second.
func busyPools() discover.Snapshot {
	var snap discover.Snapshot
	for i, vg := range []string{"vg1", "vg2"} {
		luns := []discover.LUNRef{
			{Target: "iqn.2026-11.lab:" + vg, LUN: 1, Device: busyDev(2 * i)},
			{Target: "iqn.2026-11.lab:" + vg, LUN: 2, Device: busyDev(2*i + 1)},
		}
		snap.Resources = append(snap.Resources, discover.Resource{Name: "sd" + vg, LUNs: luns, Devices: []string{luns[0].Device, luns[1].Device}})
		snap.Consumers = append(snap.Consumers, discover.Consumer{Addr: busyAddr(2 * i), LUNs: luns[:1]}, discover.Consumer{Addr: busyAddr(2*i + 1), LUNs: luns[1:]})
	}
	return snap
}

func busyDev(i int) string           { return "loop" + string(rune('0'+i)) }
func busyAddr(i int) netip.Addr      { return netip.AddrFrom4([4]byte{10, 99, 0, byte(2 + i)}) }
func busyWriters() (vg1, vg2 string) { return busyAddr(1).String(), busyAddr(3).String() }

// busySampler's every device moves on each read: the readers read with
// a 30 ms wait, the writers write 20 MB/s.
type busySampler struct{ n uint64 }

func (s *busySampler) Read(...string) (map[string]sample.Counters, error) {
	s.n++
	t := time.Unix(0, 0).Add(time.Duration(s.n) * 100 * time.Millisecond)
	out := map[string]sample.Counters{}
	for i := 0; i < 4; i += 2 {
		out[busyDev(i)] = sample.Counters{Device: busyDev(i), Time: t, Reads: 4 * s.n, ReadTicks: 120 * s.n, ReadSectors: 64 * s.n}
		out[busyDev(i+1)] = sample.Counters{Device: busyDev(i + 1), Time: t, Writes: 30 * s.n, WriteSectors: 3900 * s.n}
	}
	return out, nil
}

// busyAgent is an agent regulating vg1 and vg2 under busySampler's load.
func busyAgent(t *testing.T) *Agent {
	noErr := error(nil)
	a := reloadAgent(t, "backend: dry-run\nresources:\n  - name: vg1\n  - name: vg2\n", busyPools(), &noErr)
	a.loops.sampler = &busySampler{}
	return a
}

// releases are the release events after seq, as "resource consumer".
func releases(t *testing.T, a *Agent, since uint64, why string) []string {
	t.Helper()
	var out []string
	for _, e := range a.Events(since) {
		if e.Kind != EventRelease {
			continue
		}
		if e.Reason != why {
			t.Errorf("%s %s released: %q, want %q", e.Resource, e.Consumer, e.Reason, why)
		}
		out = append(out, e.Resource+" "+e.Consumer)
	}
	return out
}

// A resource a reload removes releases whom it slowed, an event each,
// and sends no event after; the others keep slowing theirs until the
// agent stops, which releases every one. The resource added back later
// slows its writer again, with a new slow event.
func TestReleaseEventsOnReloadAndStop(t *testing.T) {
	a := busyAgent(t)
	w1, w2 := busyWriters()
	tick := time.Unix(100, 0)
	step := func(n int) {
		for range n {
			tick = tick.Add(100 * time.Millisecond)
			if err := a.Step(tick); err != nil {
				t.Fatal(err)
			}
		}
	}
	step(5)
	slowed := map[string]bool{}
	for _, e := range a.Events(0) {
		if e.Kind == EventSlow {
			slowed[e.Resource+" "+e.Consumer] = true
		}
	}
	if !slowed["vg1 "+w1] || !slowed["vg2 "+w2] || len(slowed) != 2 {
		t.Fatalf("slowed %v, want each resource's writer", slowed)
	}
	reload := func(yaml string) {
		t.Helper()
		nc, err := config.Parse([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Reload(nc); err != nil {
			t.Fatal(err)
		}
	}
	seq := a.LastEvent()
	reload("backend: dry-run\nresources:\n  - name: vg1\n")
	if got := releases(t, a, seq, releaseRemoved); !slices.Equal(got, []string{"vg2 " + w2}) {
		t.Errorf("reload removing vg2 released %v, want vg2's writer", got)
	}
	// A late event of the removed resource's (its last tick, in the
	// daemon's goroutine) is dropped.
	a.loops.emit(Event{Resource: "vg2", Consumer: w2, Kind: EventSlow})
	step(5)
	for _, e := range a.Events(seq) {
		if e.Resource == "vg2" && e.Kind != EventRelease || e.Resource == "vg1" {
			t.Errorf("after the reload: %s", e.Text())
		}
	}
	if s := a.deps.Throttle.List(); len(s) != 1 || s[netip.MustParseAddr(w1)].IsZero() {
		t.Errorf("throttles after vg2's removal: %v, want vg1's writer alone", s)
	}
	seq = a.LastEvent()
	reload("backend: dry-run\nresources:\n  - name: vg1\n  - name: vg2\n")
	step(5)
	if evs := a.Events(seq); len(evs) != 1 || evs[0].Kind != EventSlow || evs[0].Consumer != w2 {
		t.Errorf("vg2 back: events %v, want its writer slowed again", evs)
	}
	seq = a.LastEvent()
	a.Release()
	if got := releases(t, a, seq, releaseStopped); !slices.Equal(got, []string{"vg1 " + w1, "vg2 " + w2}) {
		t.Errorf("stop released %v, want both writers", got)
	}
	if s := a.deps.Throttle.List(); len(s) != 0 {
		t.Errorf("throttles after the stop: %v", s)
	}
}

// signalThrottle says when it first applies a delay.
type signalThrottle struct {
	*throttle.Memory
	slowed chan struct{}
}

func (s signalThrottle) Set(m map[netip.Addr]throttle.Setting) error {
	for _, v := range m {
		if !v.IsZero() {
			select {
			case s.slowed <- struct{}{}:
			default:
			}
		}
	}
	return s.Memory.Set(m)
}

// The daemon's Run, stopped, releases whom its resources slowed with an
// event each, as its tick had not: its throttles are cleared as it ends.
func TestRunReleasesEventsOnStop(t *testing.T) {
	a := busyAgent(t)
	sig := signalThrottle{throttle.NewMemory(), make(chan struct{}, 1)}
	a.deps.Throttle, a.loops.t = sig, sig
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	<-sig.slowed // the slow event came before the setting was sent
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var slowed, released []string
	for _, e := range a.Events(0) {
		switch e.Kind {
		case EventSlow:
			slowed = append(slowed, e.Resource+" "+e.Consumer)
		case EventRelease:
			if e.Reason == releaseStopped {
				released = append(released, e.Resource+" "+e.Consumer)
			}
		}
	}
	slices.Sort(slowed)
	if len(slowed) == 0 || !slices.Equal(slowed, released) {
		t.Errorf("slowed %v, released at the stop %v", slowed, released)
	}
	if s := sig.List(); len(s) != 0 {
		t.Errorf("throttles after the stop: %v", s)
	}
}
