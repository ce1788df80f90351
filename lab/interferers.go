package lab

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/lab/diskmodel"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// A controlled experiment's interferers: the load beside the reader that
// the agent must slow, and in which directions (issue 30: writers, as in
// the thesis, or readers, or both).

// interferers are a controlled experiment's load beside the reader: what
// b3..b5 run during one on-period, and what a static delay must slow.
type interferers struct {
	// name is summary.json's interferers ("": the thesis' writers).
	name string
	// one and many name them in messages and plot titles.
	one, many string
	// jobs are their fio jobs, on from start for runtime.
	jobs func(r *Runner, start, runtime time.Duration) []Job
	// reads: they read (a backup) or read and write (mixed I/O). Their
	// read rate then counts with their writes, their reads date a load
	// step's onset, and the oracle and delay.png take both directions'
	// delay. Writers keep the write delay alone, as before issue 30.
	reads bool
}

var (
	// writerLoad is the thesis' load: sequential 64 KiB writer threads
	// (12 unless --writers) spread over b3..b5.
	writerLoad = &interferers{one: "writer", many: "writers", jobs: func(r *Runner, start, runtime time.Duration) []Job {
		return r.writers(r.controlledWriters(), start, runtime)
	}}
)

// groupBS is bs made smaller on a modelled disk group slower than the
// default, so one request holds the group about as long as there (see
// writerBS); bs itself on the default group and on a real disk.
func (r *Runner) groupBS(bs int) int {
	if r.State == nil || r.State.Options.RealDisk {
		return bs
	}
	return scaledBS(bs, r.State.Options.Model.Bandwidth, diskmodel.DefaultParams().Bandwidth)
}

// setting is the static delay d as the oracle sets it on every
// interferer: both directions where they read, else the write delay.
func (l *interferers) setting(d time.Duration) throttle.Setting {
	if l.reads {
		return throttle.Setting{ReadDelay: d, WriteDelay: d}
	}
	return throttle.Setting{WriteDelay: d}
}

// delay is the delay of s that acts on these interferers (ms): the write
// delay, or the larger of both directions where they read.
func (l *interferers) delay(s throttle.Setting) float64 {
	d := s.WriteDelay
	if l.reads {
		d = max(d, s.ReadDelay)
	}
	return float64(d) / 1e6
}

// moved is what the rate plot sums over the interferers (MB/s): their
// writes, or their reads plus writes.
func (l *interferers) moved(iv sample.Interval) float64 {
	if l.reads {
		return (iv.ReadBps + iv.WriteBps) / 1e6
	}
	return writeMBs(iv)
}

// interfererAddrs are the hosts whose delay the oracle sets: every host
// but the reader's.
func interfererAddrs() []netip.Addr {
	var a []netip.Addr
	for _, h := range Hosts[1:] {
		a = append(a, HostAddr(h))
	}
	return a
}

// setInterferers gives every interferer host l's static delay d (0 clears).
func setInterferers(a *LabAgent, l *interferers, d time.Duration) error {
	if d == 0 {
		return a.Clear(interfererAddrs()...)
	}
	m := map[netip.Addr]throttle.Setting{}
	for _, x := range interfererAddrs() {
		m[x] = l.setting(d)
	}
	return a.Set(m)
}

// ioTicks are ticks in which the interferers' reads count as writes:
// report.FirstSecond dates a load step by the first interval in which an
// interferer wrote, and a backup never writes. The reader's are as they
// were.
func ioTicks(ticks []Tick) []Tick {
	out := make([]Tick, len(ticks))
	for i, t := range ticks {
		out[i] = report.Tick{T: t.T, Dev: make(map[string]sample.Interval, len(t.Dev))}
		for h, iv := range t.Dev {
			if h != "b2" {
				iv.Writes += iv.Reads
			}
			out[i].Dev[h] = iv
		}
	}
	return out
}

// unreachable says why a threshold at or below the reader's p95 alone
// cannot be held by slowing these interferers.
func (l *interferers) unreachable(aloneP95 float64) string {
	return fmt.Sprintf("the threshold is at or below the reader's p95 with no %s at all (%.2f ms): the group's own service time for its reads, which slowing %s cannot shorten", l.one, aloneP95, l.many)
}
