package agent

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/sample"
)

// fixedRates is a wire sampler whose every sample has the same bytes.
type fixedRates map[netip.Addr]sample.Rate

func (f fixedRates) Sample() (map[netip.Addr]sample.Rate, error) { return f, nil }

// The counters add up diskstats' deltas over the ticks (counters():
// loop0 4 reads of 8 KiB a tick at the given wait, loop1 and loop2 30
// writes of 3900 sectors each): the resource's are every device's, the
// indicator's the measured reads', and a consumer's I/Os and waits are
// its devices' only where no other consumer shares them; its bytes are
// the wire's when the agent samples it.
func TestIOTotals(t *testing.T) {
	const ticks = 5 // the first is the baseline: 4 intervals
	exclusive := map[netip.Addr][]string{reader: {"loop0"}, writer: {"loop1"}, boss: {"loop2"}}
	shared := map[netip.Addr][]string{reader: {"loop0", "loop1"}, writer: {"loop0", "loop1"}, boss: {"loop2"}}
	wire := fixedRates{reader: {ReadBytes: 1000}, writer: {WriteBytes: 5000}}
	for _, tc := range []struct {
		name      string
		consumers map[netip.Addr][]string
		rates     RateSampler
		// indReads are the reads the indicator measured: the shared
		// devices' users saturate them by their devices' rates (the
		// throttleable set), so from the second interval the indicator
		// leaves those devices out; by the wire's small rates they do not.
		indReads float64
		want     map[netip.Addr]ConsumerIO
	}{
		{"own devices", exclusive, nil, 16, map[netip.Addr]ConsumerIO{
			reader: {IOTotals: IOTotals{ReadBytes: 4 * 64 * 512, Reads: 4 * 4, ReadWaitSeconds: 4 * 4 * 0.010}, HasBytes: true, HasIO: true},
			writer: {IOTotals: IOTotals{WrittenBytes: 4 * 3900 * 512, Writes: 4 * 30}, HasBytes: true, HasIO: true},
		}},
		{"shared devices: nothing of theirs is known", shared, nil, 4, map[netip.Addr]ConsumerIO{
			reader: {}, writer: {},
			boss: {IOTotals: IOTotals{WrittenBytes: 4 * 3900 * 512, Writes: 4 * 30}, HasBytes: true, HasIO: true},
		}},
		// fixedRates has bytes from the first tick on (TCPRates' first
		// sample is a baseline): 5 samples.
		{"shared devices, the wire's bytes", shared, wire, 16, map[netip.Addr]ConsumerIO{
			reader: {IOTotals: IOTotals{ReadBytes: 5 * 1000}, HasBytes: true},
			writer: {IOTotals: IOTotals{WrittenBytes: 5 * 5000}, HasBytes: true},
			boss:   {HasBytes: true, HasIO: true, IOTotals: IOTotals{Writes: 4 * 30}}, // no connection: 0 bytes
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := testLoops(t)
			l.SetTopology(&Topology{Resources: map[string]ResourceView{"vg1": {Devices: []string{"loop0", "loop1", "loop2"}, Consumers: tc.consumers}}})
			ss := &seqSampler{}
			for i := 1; i <= ticks; i++ {
				ss.snaps = append(ss.snaps, counters(i, 10))
			}
			l.sampler = ss
			if tc.rates != nil {
				l.UseRates(tc.rates)
			}
			for i := 1; i <= ticks; i++ {
				if err := l.Step(time.Unix(0, int64(i)*1e8)); err != nil {
					t.Fatal(err)
				}
			}
			st := l.Status()[0]
			res := IOTotals{ReadBytes: 4 * 64 * 512, WrittenBytes: 4 * 2 * 3900 * 512, Reads: 4 * 4, Writes: 4 * 2 * 30, ReadWaitSeconds: 4 * 4 * 0.010}
			if !closeIO(st.IO.IOTotals, res) || !near6(st.IO.IndicatorReads, tc.indReads) || !near6(st.IO.IndicatorReadWaitSeconds, tc.indReads*0.010) {
				t.Errorf("resource: %+v, want %+v and %v indicator reads of 10 ms", st.IO, res, tc.indReads)
			}
			for _, cs := range st.Consumers {
				w, ok := tc.want[netip.MustParseAddr(cs.Addr)]
				if !ok {
					continue
				}
				if cs.IO.HasBytes != w.HasBytes || cs.IO.HasIO != w.HasIO || !closeIO(cs.IO.IOTotals, w.IOTotals) {
					t.Errorf("%s: %+v, want %+v", cs.Addr, cs.IO, w)
				}
			}
		})
	}
}

func near6(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

func closeIO(a, b IOTotals) bool {
	return near6(a.ReadBytes, b.ReadBytes) && near6(a.WrittenBytes, b.WrittenBytes) && near6(a.Reads, b.Reads) &&
		near6(a.Writes, b.Writes) && near6(a.ReadWaitSeconds, b.ReadWaitSeconds) && near6(a.WriteWaitSeconds, b.WriteWaitSeconds)
}

// A consumer that leaves loses its counters (its series go); the others
// keep counting across the recompiled plan.
func TestIOTotalsAcrossTopologyChange(t *testing.T) {
	l, _ := testLoops(t)
	ss := &seqSampler{}
	for i := 1; i <= 4; i++ {
		ss.snaps = append(ss.snaps, counters(i, 10))
	}
	l.sampler = ss
	view := func(withWriter bool) *Topology {
		v := ResourceView{Devices: []string{"loop0", "loop1", "loop2"}, Consumers: map[netip.Addr][]string{reader: {"loop0"}, boss: {"loop2"}}}
		if withWriter {
			v.Consumers[writer] = []string{"loop1"}
		}
		return &Topology{Resources: map[string]ResourceView{"vg1": v}}
	}
	for i, topo := range []*Topology{view(true), view(true), view(false), view(true)} {
		l.SetTopology(topo)
		if err := l.Step(time.Unix(0, int64(i+1)*1e8)); err != nil {
			t.Fatal(err)
		}
	}
	for _, cs := range l.Status()[0].Consumers {
		// reader: 3 intervals; writer: back at the last tick, from 0.
		want := map[string]float64{reader.String(): 3 * 4, writer.String(): 0, boss.String(): 0}[cs.Addr]
		if got := cs.IO.Reads; got != want {
			t.Errorf("%s: %v reads, want %v", cs.Addr, got, want)
		}
		if cs.Addr == writer.String() && cs.IO.Writes != 30 {
			t.Errorf("writer back: %v writes, want 30 (one interval)", cs.IO.Writes)
		}
	}
}

// A device a view lists twice is counted once.
func TestIOTotalsDuplicateDevice(t *testing.T) {
	l, _ := testLoops(t)
	l.SetTopology(&Topology{Resources: map[string]ResourceView{"vg1": {Devices: []string{"loop0", "loop0", "loop1"},
		Consumers: map[netip.Addr][]string{reader: {"loop0"}, writer: {"loop1"}}}}})
	ss := &seqSampler{}
	for i := 1; i <= 5; i++ {
		ss.snaps = append(ss.snaps, counters(i, 10))
	}
	l.sampler = ss
	for i := 1; i <= 5; i++ {
		if err := l.Step(time.Unix(0, int64(i)*1e8)); err != nil {
			t.Fatal(err)
		}
	}
	if st := l.Status()[0]; st.IO.Reads != 16 || st.IO.Writes != 120 {
		t.Errorf("resource: %v reads, %v writes, want 16 and 120", st.IO.Reads, st.IO.Writes)
	}
}
