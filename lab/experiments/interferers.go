package experiments

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/lab/diskmodel"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// Issue 30's interferers: the reader is protected not only from writers
// but from whoever saturates the pool, in whichever direction. read-backup
// and mixed keep autonomic's reader, on/off cycles, default config
// (threshold only), baseline and same-run oracle, and change only the
// load of b3..b5, so their summaries compare with autonomic's line by
// line (the sim has the same two scenarios, sim/interferers.go).

// interferers are a controlled experiment's load beside the reader: what
// b3..b5 run during one on-period, and what a static delay must slow.
type interferers struct {
	// name is summary.json's interferers ("": the thesis' writers).
	name string
	// one and many name them in messages and plot titles.
	one, many string
	// jobs are their fio jobs, on from start for runtime.
	jobs func(r *runner, start, runtime time.Duration) []lab.Job
	// reads: they read (a backup) or read and write (mixed I/O). Their
	// read rate then counts with their writes, their reads date a load
	// step's onset, and the oracle and delay.png take both directions'
	// delay. Writers keep the write delay alone, as before issue 30.
	reads bool
}

var (
	// writerLoad is the thesis' load: sequential 64 KiB writer threads
	// (12 unless --writers) spread over b3..b5.
	writerLoad = &interferers{one: "writer", many: "writers", jobs: func(r *runner, start, runtime time.Duration) []lab.Job {
		return r.writers(r.controlledWriters(), start, runtime)
	}}
	backupLoad = &interferers{name: "readers", one: "backup stream", many: "backup streams", jobs: (*runner).backupReaders, reads: true}
	mixedLoad  = &interferers{name: "mixed", one: "mixed stream", many: "mixed streams", jobs: (*runner).mixedIO, reads: true}
)

// backupStreams are read-backup's streams per host: 4 on each of b3..b5,
// 12 in all as the thesis' writers, each with one request in flight
// (fio's libiscsi engine is synchronous).
const backupStreams = 4

// backupReaders is a backup spread over b3..b5: each host reads its own
// LUN sequentially, 64 KiB, each stream in its own region of it.
func (r *runner) backupReaders(start, runtime time.Duration) []lab.Job {
	var jobs []lab.Job
	for _, h := range lab.Hosts[1:] {
		jobs = append(jobs, r.interferer(h, lab.Job{Name: "backup", RW: "read", BS: 64 << 10, NumJobs: backupStreams}, start, runtime))
	}
	return jobs
}

// mixes are the mixed experiment's hosts, b3, b4 and b5 in order: random
// I/O as VMs and databases issue it, each request's direction drawn by
// fio from the read share.
var mixes = []lab.Job{
	{Name: "vm", RW: "randrw", BS: 8 << 10, RWMixRead: 70, NumJobs: 4},          // a VM's general I/O
	{Name: "oltp", RW: "randrw", BS: 8 << 10, RWMixRead: 50, NumJobs: 4},        // an OLTP database's data file
	{Name: "checkpoint", RW: "randrw", BS: 64 << 10, RWMixRead: 50, NumJobs: 2}, // a VM's larger I/O, a checkpoint
}

// mixedIO puts mixes[i] on Hosts[i+1], each host on its own LUN.
func (r *runner) mixedIO(start, runtime time.Duration) []lab.Job {
	var jobs []lab.Job
	for i, m := range mixes {
		jobs = append(jobs, r.interferer(lab.Hosts[i+1], m, start, runtime))
	}
	return jobs
}

// interferer is j (name, rw, bs, mix, threads) on host's LUN, on from
// start for runtime, each thread in its own region as the writers'. The
// block size shrinks with a modelled group slower than the default, as
// the writers' does (groupBS).
func (r *runner) interferer(host string, j lab.Job, start, runtime time.Duration) lab.Job {
	j.Host, j.URL, j.Start, j.Runtime = host, r.LUN(host).URL, start, runtime
	j.BS = r.groupBS(j.BS)
	j.Size = r.State.Options.LUNSize / int64(max(j.NumJobs, 1)) / 65536 * 65536
	return j
}

// groupBS is bs made smaller on a modelled disk group slower than the
// default, so one request holds the group about as long as there (see
// writerBS); bs itself on the default group and on a real disk.
func (r *runner) groupBS(bs int) int {
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
	for _, h := range lab.Hosts[1:] {
		a = append(a, lab.HostAddr(h))
	}
	return a
}

// setInterferers gives every interferer host l's static delay d (0 clears).
func setInterferers(a *lab.LabAgent, l *interferers, d time.Duration) error {
	return setAll(a, interfererAddrs(), l.setting(d))
}

// setAll gives every address s; the zero Setting clears them.
func setAll(a *lab.LabAgent, addrs []netip.Addr, s throttle.Setting) error {
	if s == (throttle.Setting{}) {
		return a.Clear(addrs...)
	}
	m := map[netip.Addr]throttle.Setting{}
	for _, x := range addrs {
		m[x] = s
	}
	return a.Set(m)
}

// unreachable says why a threshold at or below the reader's p95 alone
// cannot be held by slowing these interferers.
func (l *interferers) unreachable(aloneP95 float64) string {
	return fmt.Sprintf("the threshold is at or below the reader's p95 with no %s at all (%.2f ms): the group's own service time for its reads, which slowing %s cannot shorten", l.one, aloneP95, l.many)
}
