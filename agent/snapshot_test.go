package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/sanqos/sanqos/sample"
)

// mapSampler is the scale sampler without Snapshot, less one device.
type mapSampler struct {
	s    *scaleSampler
	drop string
}

func (m *mapSampler) Read(...string) (map[string]sample.Counters, error) {
	out := map[string]sample.Counters{}
	for d, c := range m.s.snap {
		if d != m.drop {
			out[d] = c
		}
	}
	return out, nil
}

// movingSampler is the scale sampler's Snapshot, less one device, with
// its devices rotated by rot: a new layout whenever either changes.
type movingSampler struct {
	s      *scaleSampler
	drop   string
	rot    int
	layout uint64
	buf    []sample.Counters
}

func (m *movingSampler) Read(...string) (map[string]sample.Counters, error) {
	panic("the tick reads a Snapshotter's Snapshot")
}

func (m *movingSampler) Snapshot() ([]sample.Counters, uint64, error) {
	m.buf = m.buf[:0]
	n := len(m.s.list)
	for i := range n {
		if c := m.s.list[(i+m.rot)%n]; c.Device != m.drop {
			m.buf = append(m.buf, c)
		}
	}
	return m.buf, m.layout, nil
}

// A tick on a Snapshotter's slice is the tick on the map of the same
// counters, whenever devices appear, go or move (its layout changes).
func TestSnapshotTickIsMapTick(t *testing.T) {
	byMap, ss := scaleLoops(20, 10)
	bySnap, _ := scaleLoops(20, 10)
	ms := &mapSampler{s: ss}
	mv := &movingSampler{s: ss}
	byMap.sampler, bySnap.sampler = ms, mv
	for i := range 60 {
		ss.advance()
		drop, rot := "", i/5
		if i%7 == 3 {
			drop = ss.names[(i*13)%len(ss.names)]
		}
		if drop != mv.drop || rot != mv.rot {
			mv.layout++
		}
		ms.drop, mv.drop, mv.rot = drop, drop, rot
		now := time.Unix(0, int64(i)*1e8)
		if err := byMap.Step(now); err != nil {
			t.Fatal(err)
		}
		if err := bySnap.Step(now); err != nil {
			t.Fatal(err)
		}
		a, b := byMap.Status(), bySnap.Status()
		for k := range a {
			if x, y := fmt.Sprintf("%+v", a[k]), fmt.Sprintf("%+v", b[k]); x != y {
				t.Fatalf("tick %d, %s:\nmap      %s\nsnapshot %s", i, a[k].Name, x, y)
			}
		}
	}
}
