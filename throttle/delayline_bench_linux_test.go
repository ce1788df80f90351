package throttle

import (
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// BenchmarkDelayLine reports packets/s through the delay line (bulk read at
// 0.5 ms) and, per delay, the error of the added round-trip delay and the
// lateness of each release against its due time.
func BenchmarkDelayLine(b *testing.B) {
	l := newLab(b)
	d := l.delayLine(b)
	b.Run("pps", func(b *testing.B) {
		tc, cc := l.conn(b, false)
		l.set(b, d, map[netip.Addr]Setting{l.cAddr: {ReadDelay: 500 * time.Microsecond, WriteDelay: 500 * time.Microsecond}})
		before := d.Counters()[l.cAddr].Packets
		start := time.Now()
		rate := bulk(b, tc, cc, time.Duration(b.N)*time.Millisecond)
		el := time.Since(start)
		after := d.Counters()[l.cAddr].Packets
		b.ReportMetric(float64(after-before)/el.Seconds(), "pkts/s")
		b.ReportMetric(rate/1e6, "MB/s")
		l.set(b, d, map[netip.Addr]Setting{l.cAddr: {}})
	})
	for _, delay := range []time.Duration{500 * time.Microsecond, 5 * time.Millisecond, 20 * time.Millisecond} {
		b.Run(fmt.Sprint("delay=", delay), func(b *testing.B) {
			tc, cc := l.conn(b, false)
			cc.SetNoDelay(true)
			tc.SetNoDelay(true)
			base := pingPong(b, tc, cc, 200)
			var lates []time.Duration
			d.mu.Lock()
			d.late = func(ns int64) { lates = append(lates, time.Duration(ns)) }
			d.mu.Unlock()
			l.set(b, d, map[netip.Addr]Setting{l.cAddr: {ReadDelay: delay}})
			rtts := pingPong(b, tc, cc, max(b.N, 20))
			l.set(b, d, map[netip.Addr]Setting{l.cAddr: {}})
			d.mu.Lock()
			d.late = nil
			d.mu.Unlock()
			b50 := pct(base, 0.5)
			for _, p := range []float64{0.5, 0.9, 0.99} {
				b.ReportMetric(float64(pct(rtts, p)-b50-delay)/1e3, fmt.Sprintf("err-p%.0f-us", p*100))
				b.ReportMetric(float64(pct(lates, p))/1e3, fmt.Sprintf("late-p%.0f-us", p*100))
			}
		})
	}
}

// BenchmarkSets10k times what the agent's actuator asks of the kernel at
// scale: one Set that throttles 10,000 consumers (their ipset is rebuilt
// and swapped in once), one that changes 100 of them (50 released, 50
// others slowed: the live set is edited, 100 netlink messages), and one
// that releases them all. Each is the whole Set, the delay line's own
// bookkeeping of 10,000 consumers included.
func BenchmarkSets10k(b *testing.B) {
	l := newLab(b)
	d := l.delayLine(b)
	on := make(map[netip.Addr]Setting, 10000)
	off := make(map[netip.Addr]Setting, 10050)
	change := make(map[netip.Addr]Setting, 100)
	for i := 1; i <= 10050; i++ {
		a := netip.AddrFrom4([4]byte{10, 232, byte(i >> 8), byte(i)})
		switch {
		case i <= 50:
			change[a] = Setting{}
		case i > 10000:
			change[a] = Setting{WriteDelay: time.Millisecond}
		}
		if i <= 10000 {
			on[a] = Setting{WriteDelay: time.Millisecond}
		}
		off[a] = Setting{}
	}
	// Wall time, and the process's CPU (user and system: the kernel's
	// work on the netlink messages is the sending thread's), which a
	// shared machine's load inflates less.
	var ins, chg, rem, insCPU, chgCPU time.Duration
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for i := 0; i < b.N; i++ {
		t0, c0 := time.Now(), cpu()
		l.set(b, d, on)
		t1, c1 := time.Now(), cpu()
		l.set(b, d, change)
		t2, c2 := time.Now(), cpu()
		l.set(b, d, off)
		ins, chg, rem = ins+t1.Sub(t0), chg+t2.Sub(t1), rem+time.Since(t2)
		insCPU, chgCPU = insCPU+c1-c0, chgCPU+c2-c1
	}
	perOp := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 / float64(b.N) }
	b.ReportMetric(perOp(ins), "insert-10k-ms")
	b.ReportMetric(perOp(chg), "change-100-ms")
	b.ReportMetric(perOp(rem), "remove-10k-ms")
	b.ReportMetric(perOp(insCPU), "insert-10k-cpu-ms")
	b.ReportMetric(perOp(chgCPU), "change-100-cpu-ms")
}
