package agent

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/sanqos/sanqos/sample"
)

// Snapshotter is a Sampler that also returns every device's counters as
// a slice whose layout (which device is at which index) changes only
// with the layout number it returns: a tick finds each plan device by
// index, not by name (10,000 string lookups were a fifth of a
// 10,000-consumer tick). sample.Diskstats and the simulator's model are.
type Snapshotter interface {
	Snapshot() (devs []sample.Counters, layout uint64, err error)
}

// tickData is what one tick sampled, for every resource's stages: the
// counters in a slice of layout layout, with idx its names' indexes.
type tickData struct {
	snap   []sample.Counters
	layout uint64
	idx    map[string]int
	rates  map[netip.Addr]sample.Rate // nil: use device rates
}

// sample reads the devices' counters: a Snapshotter's slice, or a map
// sampler's counters laid out by tickLayout.fromMap, so the stages read
// one shape.
func (l *Loops) sample() (tickData, error) {
	if s, ok := l.sampler.(Snapshotter); ok {
		snap, layout, err := s.Snapshot()
		if err != nil {
			return tickData{}, err
		}
		return l.lay.of(snap, layout), nil
	}
	m, err := l.sampler.Read()
	if err != nil {
		return tickData{}, err
	}
	return l.lay.fromMap(m), nil
}

// tickLayout keeps, across ticks, each device's index in the sampled
// slice (rebuilt when the layout changes) and, for a map sampler, its
// names in sorted order, their layout number and the slice reused.
type tickLayout struct {
	idx    map[string]int
	layout uint64
	names  []string
	mapped uint64
	snap   []sample.Counters
}

// of is the tick's data for a slice of layout layout.
func (t *tickLayout) of(snap []sample.Counters, layout uint64) tickData {
	if t.idx == nil || layout != t.layout {
		t.idx, t.layout = make(map[string]int, len(snap)), layout
		for i, c := range snap {
			t.idx[c.Device] = i // the last of a name, as a map of them keeps
		}
	}
	return tickData{snap: snap, layout: layout, idx: t.idx}
}

// fromMap lays a map's counters out by name: the names kept from the
// last tick while the map has exactly them, a new layout when not.
func (t *tickLayout) fromMap(m map[string]sample.Counters) tickData {
	same := len(m) == len(t.names)
	for _, n := range t.names {
		if _, ok := m[n]; !ok {
			same = false
			break
		}
	}
	if !same {
		t.names = slices.Sorted(maps.Keys(m))
		t.mapped++
	}
	t.snap = t.snap[:0]
	for _, n := range t.names {
		t.snap = append(t.snap, m[n])
	}
	return t.of(t.snap, t.mapped)
}
