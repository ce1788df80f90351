package agent

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/cost"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// The lab's consumers as the agent measures them in a saturated tick
// (queue: mean requests in the resource; load in resource s/s): the
// reader b2 (one 8 KiB random read at a time, 256 KiB/s), a backup host
// (four 64 KiB sequential streams), a VM (four 8 KiB random streams, 70 %
// reads), a thesis writer host (four 64 KiB sequential streams) and a
// host that writes a little.
var (
	labReader = ConsumerInput{Addr: c1, HasDevices: true, ReadBps: 256 << 10, ReadEWMA: 256 << 10, Queue: 0.8, Load: cost.Load{Read: 0.17}}
	labBackup = ConsumerInput{Addr: c2, HasDevices: true, ReadBps: 9.4e6, ReadEWMA: 9.4e6, Queue: 3.9, Load: cost.Load{Read: 0.26}}
	labVM     = ConsumerInput{Addr: c3, HasDevices: true, ReadBps: 0.4e6, ReadEWMA: 0.4e6, WriteBps: 0.17e6, WriteEWMA: 0.17e6, Queue: 3.4, Load: cost.Load{Read: 0.26, Write: 0.11}}
	labWriter = ConsumerInput{Addr: c4, HasDevices: true, WriteBps: 5e6, WriteEWMA: 5e6, Queue: 3.7, Load: cost.Load{Write: 0.27}}
	trickle   = ConsumerInput{Addr: netip.MustParseAddr("10.0.0.5"), HasDevices: true, WriteBps: 0.2e6, WriteEWMA: 0.2e6, Queue: 0.1, Load: cost.Load{Write: 0.01}}
)

func important(c ConsumerInput) ConsumerInput { c.Important = true; return c }

// Each policy slows the direction that saturates: a backup's reads, a
// writer's writes, a VM's both; never the
// reader, nor anyone named important.
func TestPoliciesDelayTheDirectionThatSaturates(t *testing.T) {
	const d = 4 * time.Millisecond
	all := []ConsumerInput{labReader, labBackup, labVM, labWriter, trickle}
	for _, tc := range []struct {
		name string
		p    Policy
		cs   []ConsumerInput
		want map[netip.Addr]throttle.Setting
	}{
		{"read-over-write, nothing named", ReadOverWrite(), all, map[netip.Addr]throttle.Setting{
			c2: {ReadDelay: d}, c3: {ReadDelay: d, WriteDelay: d}, c4: {WriteDelay: d}}},
		{"important-sets: the named backup is not slowed", ImportantSets(),
			[]ConsumerInput{important(labReader), important(labBackup), labVM, labWriter}, map[netip.Addr]throttle.Setting{
				c3: {ReadDelay: d, WriteDelay: d}, c4: {WriteDelay: d}}},
		// Equal weights, rates 0.26 + 9.4 + 0.57 + 5 + 0.2 MB/s: share
		// 3.09; the backup (9.4) and the writer (5) are above it, the
		// writer by 62 % (2.47 → 2.5 ms).
		{"weighted", Weighted(nil), all, map[netip.Addr]throttle.Setting{
			c2: {ReadDelay: d}, c4: {WriteDelay: 2500 * time.Microsecond}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := input(d, tc.cs...)
			in.MaxDelay, in.BulkQueue, in.ReadBps = 20*time.Millisecond, 1.25, 1e6
			if got := byAddr(in, tc.p.Decide(in)); !mapsEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	// Pinned at max_delay with the threshold still missed, the other
	// direction is slowed too: the writer's replies, the backup's ACKs.
	in := input(20*time.Millisecond, all...)
	in.MaxDelay, in.BulkQueue, in.ReadBps = 20*time.Millisecond, 1.25, 1e6
	both := throttle.Setting{ReadDelay: 20 * time.Millisecond, WriteDelay: 20 * time.Millisecond}
	if got := byAddr(in, ReadOverWrite().Decide(in)); !mapsEqual(got, map[netip.Addr]throttle.Setting{c2: both, c3: both, c4: both}) {
		t.Errorf("pinned: got %v, want every saturating consumer slowed both ways", got)
	}
}

// A consumer joins by any rule (its queue, its read or write rate, a
// static listing), stays while the resource is regulated (its delay moves
// its queue onto the wire and slows its rates), and leaves once
// regulation ends with no rule holding and its queue under half the
// mark.
func TestBulkSetIsStickyWhileRegulated(t *testing.T) {
	const mark = 1.25
	for _, tc := range []struct {
		name  string
		ticks []struct {
			queue, readMBs, writeMBs float64
			regulated, want          bool
		}
	}{
		{"by its queue", []struct {
			queue, readMBs, writeMBs float64
			regulated, want          bool
		}{
			{1.0, 0, 0, false, false}, // below the mark
			{1.3, 0, 0, false, true},  // joins
			{0.4, 0, 0, true, true},   // slowed: its queue fell, it stays
			{0.4, 0, 0, true, true},
			{0.8, 0, 0, false, true}, // released, above half the mark
			{0.6, 0, 0, false, false},
			{1.0, 0, 0, true, false}, // not back in below the mark
		}},
		{"a writer near the thesis' rate threshold is not slowed every other tick", []struct {
			queue, readMBs, writeMBs float64
			regulated, want          bool
		}{
			{0.8, 0, 1.2, true, true},
			{0.8, 0, 0.9, true, true},
			{0.8, 0, 1.1, true, true},
			{0.5, 0, 0.9, false, false},
		}},
		{"a reader above the read rate", []struct {
			queue, readMBs, writeMBs float64
			regulated, want          bool
		}{
			{0.9, 0.9, 0, true, false},
			{0.9, 1.3, 0, true, true},
			{0.3, 0.4, 0, true, true},
			{0.3, 0.4, 0, false, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s bulkSet
			b := labBackup
			for i, tk := range tc.ticks {
				b.Queue, b.ReadEWMA, b.WriteEWMA = tk.queue, tk.readMBs*1e6, tk.writeMBs*1e6
				in := &PolicyInput{BulkQueue: mark, ReadBps: 1e6, WriteBps: 1e6, Consumers: []ConsumerInput{b}}
				if tk.regulated {
					in.Output = time.Millisecond
				}
				if s.tick(in); s.member(0, &b, in) != tk.want {
					t.Fatalf("tick %d (%+v): member %v, want %v", i, tk, !tk.want, tk.want)
				}
			}
		})
	}
	var s bulkSet
	c := important(labBackup)
	on := &PolicyInput{BulkQueue: mark, ReadBps: 1e6, WriteBps: 1e6, Output: time.Millisecond, Consumers: []ConsumerInput{c, labBackup}}
	off := &PolicyInput{Output: time.Millisecond, Consumers: on.Consumers}
	if s.tick(on); s.member(0, &c, on) || s.member(1, &labBackup, off) {
		t.Error("an important consumer, or a backup with every rule off, joined")
	}
}

// The indicator leaves out the devices only slowed consumers use: the
// backup's own waits are not what is protected. A device shared with an
// unslowed consumer stays in, and with every device excluded all count.
func TestIndicatorReadsLeaveOutTheSlowed(t *testing.T) {
	iv := func(reads uint64, wait float64) sample.Interval {
		return sample.Interval{Reads: reads, ReadWaitMs: wait, Seconds: 0.1}
	}
	p := &plan{measured: []int{0, 1, 2},
		consumers: []planConsumer{{addr: c1}, {addr: c2}, {addr: c3}},
		users:     [][]int{{0}, {1}, {1, 2}}}
	ivs := []sample.Interval{iv(3, 8), iv(40, 30), iv(10, 20)}
	ok := []bool{true, true, true}
	for _, tc := range []struct {
		name   string
		slowed map[netip.Addr]bool
		want   float64 // mean wait, ms
	}{
		{"nobody slowed", nil, (3*8 + 40*30 + 10*20) / 53.0},
		{"the backup slowed: its own device out", map[netip.Addr]bool{c2: true}, (3*8 + 10*20) / 13.0},
		{"everyone slowed: all devices", map[netip.Addr]bool{c1: true, c2: true, c3: true}, (3*8 + 40*30 + 10*20) / 53.0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ticks, reads := indicatorReads(p, ivs, ok, marks(p, tc.slowed))
			if got := ticks / reads; math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("indicator %.3f ms, want %.3f", got, tc.want)
			}
		})
	}
}

// A consumer's load estimate rests through an idle spell up to idle_hold,
// so a mixed VM back at its next load step is still in the policy's set
// and keeps its held delays; past the hold, or with no hold, idle ticks
// decay it as before. The load is labVM's, measured for a second, then
// idle for four seconds (the lab's off periods are five).
func TestLoadEstimateRestsWhileIdle(t *testing.T) {
	const tick = 100 * time.Millisecond
	for _, tc := range []struct {
		name string
		hold time.Duration
		// want is the load after the idle spell as a fraction of before.
		wantMin, wantMax float64
	}{
		{"hold longer than the spell: unchanged", 30 * time.Second, 1, 1},
		{"no hold: decays as any tick", 0, 0, 0.01},
		{"spell longer than a 2 s hold: decays for the rest", 2 * time.Second, 0.01, 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e loadEstimate
			for range 10 {
				e.observe(tick, tc.hold, true, labVM.Queue, labVM.Load, labVM.ReadBps, 0)
			}
			before := e
			for range 40 {
				e.observe(tick, tc.hold, false, 0, cost.Load{}, 0, 0)
			}
			for _, f := range []struct {
				name     string
				got, was float64
			}{
				{"queue", e.queue, before.queue},
				{"read load", e.load.Read, before.load.Read},
				{"write load", e.load.Write, before.load.Write},
				{"read rate", e.readBps, before.readBps},
			} {
				r := f.got / f.was
				if f.name == "read rate" && tc.wantMax < 1 {
					// Smoothed over 2 s, not 0.5 s: it decays slower.
					if r >= 1 {
						t.Errorf("%s: %.3g of before, want it to decay", f.name, r)
					}
					continue
				}
				if r < tc.wantMin || r > tc.wantMax {
					t.Errorf("%s: %.3g of before, want %.2g-%.2g", f.name, r, tc.wantMin, tc.wantMax)
				}
			}
			e.observe(tick, tc.hold, true, labVM.Queue, labVM.Load, labVM.ReadBps, 0)
			if e.idleFor != 0 {
				t.Errorf("idle for %v after a tick that moved data, want 0", e.idleFor)
			}
		})
	}
}

// The queue rule on a consumer's own devices counts its requests in
// flight, not the time its completed requests waited: a one-at-a-time
// reader whose reads take over 40 ms (the LIO guest's, behind 64 KiB
// writes on a 4 MB/s group) is never judged saturating, however its
// completions fall into ticks, while a writer that keeps the disk queue
// full is. Little's law over completions (the rule before) took the
// reader for a saturating one where its reads completed in a short tick
// (the guest's late ticks: 180 ms, then 20 ms) and counted 1.5 there.
func TestQueueRuleCountsRequestsInFlight(t *testing.T) {
	type tick struct {
		secs          float64 // the interval
		reads, writes uint64  // completed in it
		waitMs        float64 // each completed request's
		inFlight      uint64  // at its end
	}
	reader := func(ticks ...tick) []tick { return ticks }
	repeat := func(n int, ts ...tick) []tick {
		var out []tick
		for range n {
			out = append(out, ts...)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		ticks []tick
		want  bool // saturating after the last tick; never before if false
	}{
		{"reader, 45 ms reads back to back", repeat(20, tick{0.1, 2, 0, 45, 1}, tick{0.1, 3, 0, 45, 1}), false},
		{"reader, 120 ms reads", repeat(20, tick{0.1, 1, 0, 120, 1}, tick{0.1, 1, 0, 120, 1}, tick{0.1, 0, 0, 0, 1}), false},
		{"reader, 45 ms reads in late ticks (180 ms, then 20 ms)", repeat(20, tick{0.18, 3, 0, 45, 1}, tick{0.02, 1, 0, 45, 1}), false},
		{"reader, a read held 400 ms at the writers' onset", append(repeat(10, tick{0.1, 3, 0, 20, 0}),
			reader(tick{0.1, 0, 0, 0, 1}, tick{0.1, 0, 0, 0, 1}, tick{0.1, 0, 0, 0, 1}, tick{0.1, 2, 0, 222, 1}, tick{0.1, 2, 0, 45, 1}, tick{0.1, 2, 0, 45, 1})...), false},
		{"writer keeping four 64 KiB writes queued", repeat(10, tick{0.1, 0, 8, 50, 4}), true},
		{"writer keeping four queued, in late ticks", repeat(10, tick{0.18, 0, 14, 50, 4}, tick{0.02, 0, 2, 50, 4}), true},
		{"two writes at a time (the guest's writer hosts)", repeat(10, tick{0.1, 0, 2, 90, 2}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Loops{cfg: LoopConfig{Interval: 100 * time.Millisecond, Cost: cost.Default()}}
			pc, load := &planConsumer{addr: c1, devs: []int{0}, exclusive: true}, &loadEstimate{}
			var ci ConsumerInput
			for i, tk := range tc.ticks {
				iv := sample.Interval{Seconds: tk.secs, Reads: tk.reads, Writes: tk.writes, ReadWaitMs: tk.waitMs, WriteWaitMs: tk.waitMs,
					ReadBps: float64(tk.reads) * 8192 / tk.secs, WriteBps: float64(tk.writes) * 65536 / tk.secs, InFlight: tk.inFlight}
				l.measureConsumer(&ci, pc, load, &lastValue{}, &devIntervals{iv: []sample.Interval{iv}, ok: []bool{true}}, &sample.Rate{}, false)
				if got := saturates(&ci, 1.25, 1e6); got && !tc.want {
					t.Fatalf("tick %d: saturating with a queue of %.2f, want never", i, ci.Queue)
				}
			}
			if got := saturates(&ci, 1.25, 1e6); got != tc.want {
				t.Errorf("saturating %v with a queue of %.2f, want %v", got, ci.Queue, tc.want)
			}
		})
	}
}

// On a device every consumer shares (tgt's one target with every host on
// every LUN, the guest's lab), a consumer's queue is Little's law per
// direction: its reads/s on the wire × the device's read wait + its
// share of the device's writes × their wait. With the devices' mean wait
// over both directions, a one-at-a-time reader at 25 reads/s behind
// slower writes counted its reads at the writes' wait and was slowed
// with the writers (guest A/B, all four runs), while a writer, whose
// commands the wire counts only by the empty part of its last segment,
// barely counted at all. The wire's commands are booked as reads, so a
// writer's queue has its writes' counted part (0.3 each) × the read wait
// too: 2.2 of the first writer's 13.4.
func TestSharedQueueRuleByDirection(t *testing.T) {
	for _, tc := range []struct {
		name                string
		reads, writes       uint64  // on the device in the tick (0.1 s): the reader's, the writer's
		readMs, writeMs     float64 // their waits
		readerQ, writerQ    float64 // Little's law per direction on each one's requests
		readerSat, writeSat bool
	}{
		{"25 reads/s at 36 ms behind 200 writes/s at 56 ms", 3, 20, 36, 56, 0.9, 13.36, false, true},
		{"25 reads/s at 40 ms behind 40 writes/s at 50 ms (two at a time)", 3, 4, 40, 50, 1, 2.48, false, true},
		{"25 reads/s at 20 ms beside a trickle of writes", 3, 1, 20, 50, 0.5, 0.56, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Loops{cfg: LoopConfig{Interval: 100 * time.Millisecond, Cost: cost.Default()}}
			iv := sample.Interval{Seconds: 0.1, Reads: tc.reads, Writes: tc.writes, ReadWaitMs: tc.readMs, WriteWaitMs: tc.writeMs,
				ReadBps: float64(tc.reads) * 8192 / 0.1, WriteBps: float64(tc.writes) * 65536 / 0.1}
			d := devIntervals{iv: []sample.Interval{iv}, ok: []bool{true}}
			for _, c := range []struct {
				addr netip.Addr
				r    sample.Rate
				q    float64
				sat  bool
			}{
				// The reader's commands are its reads; the writer's 64 KiB
				// writes count 0.3 each on the wire (sample.commands).
				{c1, sample.Rate{ReadBps: 25 * 8192, CommandsPerSec: 25}, tc.readerQ, tc.readerSat},
				{c2, sample.Rate{WriteBps: iv.WriteBps, CommandsPerSec: 0.3 * float64(tc.writes) / 0.1}, tc.writerQ, tc.writeSat},
			} {
				pc, load := &planConsumer{addr: c.addr, devs: []int{0}}, &loadEstimate{}
				var ci ConsumerInput
				for range 10 {
					l.measureConsumer(&ci, pc, load, &lastValue{}, &d, &c.r, true)
				}
				if got := saturates(&ci, 1.25, 0); got != c.sat || math.Abs(ci.Queue-c.q) > 0.01 {
					t.Errorf("%v: queue %.2f (saturating %v), want %.2f (%v)", c.addr, ci.Queue, got, c.q, c.sat)
				}
			}
		})
	}
}

// A tick's queue weighs by the tick's length: after a stall (a starved
// guest: a tick 800 ms late) the ticker's next tick comes 0-100 ms
// later (the LIO guest's 180 ms, then 20 ms), and a few milliseconds'
// Little's law is one command's rate × a whole read's wait (1 command
// in 5 ms × 30 ms: 6). Weighed as a full 100 ms tick, it took a
// one-at-a-time reader on shared LUNs to 1.8-3.3.
func TestQueueWeighsTicksByLength(t *testing.T) {
	type tick struct {
		secs, cmds float64 // the interval; the reader's commands in it
		reads      uint64  // completed in it
		waitMs     float64
	}
	steady := tick{0.1, 3, 3, 30}
	for _, tc := range []struct {
		name  string
		ticks []tick
	}{
		{"steady", []tick{steady, steady, steady}},
		{"a late tick, then one at once", []tick{steady, {0.8, 4, 4, 200}, {0.005, 1, 1, 30}, steady}},
		{"two late ticks", []tick{{0.8, 4, 4, 200}, {0.002, 1, 1, 30}, steady, {0.8, 4, 4, 200}, {0.002, 1, 1, 30}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Loops{cfg: LoopConfig{Interval: 100 * time.Millisecond, Cost: cost.Default()}}
			pc, load := &planConsumer{addr: c1, devs: []int{0}}, &loadEstimate{}
			var ci ConsumerInput
			for i := range 20 {
				tk := tc.ticks[i%len(tc.ticks)]
				iv := sample.Interval{Seconds: tk.secs, Reads: tk.reads, ReadWaitMs: tk.waitMs, ReadBps: float64(tk.reads) * 8192 / tk.secs}
				l.measureConsumer(&ci, pc, load, &lastValue{}, &devIntervals{iv: []sample.Interval{iv}, ok: []bool{true}},
					&sample.Rate{ReadBps: iv.ReadBps, CommandsPerSec: tk.cmds / tk.secs}, true)
				if ci.Queue >= 1.25 {
					t.Fatalf("tick %d: the reader's queue %.2f, saturating", i, ci.Queue)
				}
			}
		})
	}
}

// The read-rate rule takes large reads for bulk ones, not small reads
// one at a time: the LIO guest's reader (8 KiB, one at a time) read
// 1.13 MB/s on the wire for a few seconds, was taken for a bulk reader
// and slowed to 90 ms (run ab-lio-9ae35fe, initiator p95 16.87× the
// threshold). A backup's one 64 KiB stream and a 1 MiB reader, each
// under one request queued, are still taken; the mean read comes from
// the wire's commands where the agent samples it and from the devices'
// reads where it does not.
func TestReadRateRuleTakesBulkReadsOnly(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mbs       float64 // read rate, MB/s
		size      int     // bytes a read
		wire      bool
		exclusive bool
		want      bool
	}{
		{"8 KiB one at a time, 1.13 MB/s on the wire, own LUN (the LIO guest's reader)", 1.13, 8 << 10, true, true, false},
		{"8 KiB one at a time, 1.1 MB/s, shared LUN, wire", 1.1, 8 << 10, true, false, false},
		{"8 KiB one at a time, 1.13 MB/s, own LUN, no wire", 1.13, 8 << 10, false, true, false},
		{"a backup's 64 KiB stream, 4.3 MB/s, wire", 4.3, 64 << 10, true, true, true},
		{"a backup's 64 KiB stream, 4.3 MB/s, no wire", 4.3, 64 << 10, false, true, true},
		{"1 MiB reads at 6 MB/s, shared LUN, wire", 6, 1 << 20, true, false, true},
		{"64 KiB reads under the rate", 0.9, 64 << 10, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Loops{cfg: LoopConfig{Interval: 100 * time.Millisecond, Cost: cost.Default()}}
			bps := tc.mbs * 1e6
			reads := bps * 0.1 / float64(tc.size)
			// Its reads, one at a time at 7 ms: under one queued.
			iv := sample.Interval{Seconds: 0.1, Reads: uint64(math.Round(reads)), ReadWaitMs: 7, ReadBps: bps, InFlight: 0}
			r := sample.Rate{ReadBps: bps, CommandsPerSec: reads / 0.1}
			pc, load := &planConsumer{addr: c1, devs: []int{0}, exclusive: tc.exclusive}, &loadEstimate{}
			var ci ConsumerInput
			for range 30 {
				l.measureConsumer(&ci, pc, load, &lastValue{}, &devIntervals{iv: []sample.Interval{iv}, ok: []bool{true}}, &r, tc.wire)
			}
			if got := saturates(&ci, 1.25, 1e6); got != tc.want || ci.Queue >= 1.25 {
				t.Errorf("saturating %v (read %.2f MB/s, %.0f KiB a read, queue %.2f), want %v", got, ci.ReadEWMA/1e6, ci.ReadSize/1024, ci.Queue, tc.want)
			}
		})
	}
}

// The agent reads diskstats, then TCP_INFO: a stall between the two (the
// starved guest) gives a tick whose wire interval is a second and the
// next one whose wire interval is 2 ms while the devices' is the second.
// One 8 KiB read over those 2 ms is 4 MB/s; weighed by the devices'
// second it took a 0.25 MB/s reader's smoothed read rate over
// throttleable_read_mb_s (LIO guest: 1.02-1.85 MB/s, docs/lab.md) and
// its queue over the mark. The wire's bytes count over the devices'
// interval (sample.Rate.Over), so the reader stays what it is.
func TestWireRatesOverTheDevicesInterval(t *testing.T) {
	type tick struct{ dev, wire, reads float64 } // intervals (s); the reader's reads on the wire
	steady := tick{0.1, 0.1, 3}
	ticks := []tick{steady, steady, {0.1, 1, 1}, {1, 0.002, 1}, steady, steady, steady, steady}
	l := &Loops{cfg: LoopConfig{Interval: 100 * time.Millisecond, Cost: cost.Default()}}
	pc, load := &planConsumer{addr: c1, devs: []int{0}}, &loadEstimate{}
	var ci ConsumerInput
	var moved float64
	for i := range 40 {
		tk := ticks[i%len(ticks)]
		b := tk.reads * 8192
		moved += b
		iv := sample.Interval{Seconds: tk.dev, Reads: uint64(tk.reads), ReadWaitMs: 30, ReadBps: b / tk.dev}
		r := sample.Rate{ReadBps: b / tk.wire, ReadBytes: uint64(b), CommandsPerSec: tk.reads / tk.wire, Seconds: tk.wire}
		l.measureConsumer(&ci, pc, load, &lastValue{}, &devIntervals{iv: []sample.Interval{iv}, ok: []bool{true}}, &r, true)
		if saturates(&ci, 1.25, 1e6) || ci.ReadEWMA > 0.5e6 {
			t.Fatalf("tick %d (%+v): read rate %.2f MB/s, queue %.2f: taken for a bulk reader", i, tk, ci.ReadEWMA/1e6, ci.Queue)
		}
	}
	if want := moved / (40 / float64(len(ticks)) * 1.8); math.Abs(ci.ReadEWMA-want) > 0.3*want {
		t.Errorf("smoothed read rate %.3f MB/s, want about %.3f", ci.ReadEWMA/1e6, want/1e6)
	}
}
