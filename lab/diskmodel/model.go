// Package diskmodel is the lab's shared storage resource: a FUSE filesystem
// whose files (the LUNs' backing files) are served through one FIFO queue
// with a disk-group service-time model, so that write load on one LUN
// raises the read wait on every other LUN in a known, repeatable way.
//
// Why a model: on this VM the real disk's hidden write-back caching made the
// reader's wait independent of how hard writers were throttled (DESIGN.md,
// "Facts"), so it is not a resource a controller can be judged against. The
// model is a single-server queue standing in for the thesis' 10 x 10k-rpm
// disks striped at 64 KiB behind one controller:
//
//	service = Overhead + (sequential ? 0 : Seek) + bytes / Bandwidth × (write ? WriteCost : 1)
//
// WriteCost stands for what a write costs a redundant group beyond its
// transfer (parity or mirror updates): the thesis measured one stream
// writing at 15 MB/s where it read at 22 (Fig 5.5/5.6).
//
// A request is sequential when it starts where a recent request of the same
// file ended (each file keeps a few such stream heads, so interleaved
// sequential writers stay sequential, as they do on a striped group with a
// write cache). Completion times follow the FIFO recurrence
// finish_i = max(arrival_i, finish_{i-1}) + service_i, computed under a
// lock, so timer oversleep never accumulates into the model.
//
// It stores data in an ordinary directory (tmpfs in the lab) and must not
// touch anything outside that directory and its mount point.
//
// Imports (sanqos): none.
package diskmodel

import (
	"bufio"
	"fmt"
	"sync"
	"time"
)

// Params describes the modelled disk group.
type Params struct {
	Seek      time.Duration `json:"seek_ns"`       // positioning time of a non-sequential request
	Overhead  time.Duration `json:"overhead_ns"`   // fixed per-request cost (controller, command)
	Bandwidth float64       `json:"bandwidth_bps"` // media transfer rate, bytes/s
	WriteCost float64       `json:"write_cost"`    // transfer-time multiplier of writes (≥ 1)
}

// DefaultParams approximate the thesis' disk group as one queue: a random
// 8 KiB read costs ~5.4 ms, a sequential 64 KiB read ~1.8 ms and a
// sequential 64 KiB write ~3.5 ms (one writer ~15 MB/s over iSCSI, as in
// the thesis), so twelve writers queue ~40 ms of work ahead of a read.
func DefaultParams() Params {
	return Params{Seek: 5 * time.Millisecond, Overhead: 200 * time.Microsecond, Bandwidth: 40e6, WriteCost: 2}
}

// Validate rejects models that cannot serve anything.
func (p Params) Validate() error {
	if p.Seek < 0 || p.Overhead < 0 {
		return fmt.Errorf("disk model: seek %v and overhead %v must not be negative", p.Seek, p.Overhead)
	}
	if p.Bandwidth < 1e5 || p.Bandwidth > 1e11 {
		return fmt.Errorf("disk model: bandwidth %.0f B/s outside 100 kB/s..100 GB/s", p.Bandwidth)
	}
	if p.WriteCost < 1 || p.WriteCost > 10 {
		return fmt.Errorf("disk model: write cost %v outside 1..10", p.WriteCost)
	}
	return nil
}

// Service is the time the group spends on one request.
func (p Params) Service(write, sequential bool, bytes int) time.Duration {
	xfer := float64(bytes) / p.Bandwidth
	if write && p.WriteCost > 1 {
		xfer *= p.WriteCost
	}
	d := p.Overhead + time.Duration(xfer*float64(time.Second))
	if !sequential {
		d += p.Seek
	}
	return d
}

// streamHeads is how many concurrent sequential streams per file are
// recognised (fio's writers on one LUN use separate offsets).
const streamHeads = 16

type fileState struct {
	heads [streamHeads]int64
	next  int
}

// Stats are cumulative counters of the queue.
type Stats struct {
	Requests   uint64        `json:"requests"`
	Sequential uint64        `json:"sequential"`
	Bytes      uint64        `json:"bytes"`
	Busy       time.Duration `json:"busy_ns"`
}

// Disk is the single FIFO server.
type Disk struct {
	p     Params
	mu    sync.Mutex
	free  time.Time // when the server finishes its current backlog
	files map[uint64]*fileState
	stats Stats
	log   *bufio.Writer // nil: no log (log.go)
}

// New returns a disk with the given model.
func New(p Params) *Disk {
	return &Disk{p: p, files: map[uint64]*fileState{}}
}

// Admit enqueues a request for file (an inode number) at off of n bytes,
// arriving at now, and returns when it completes.
func (d *Disk) Admit(now time.Time, write bool, file uint64, off int64, n int) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	fs := d.files[file]
	if fs == nil {
		fs = &fileState{}
		for i := range fs.heads {
			fs.heads[i] = -1
		}
		d.files[file] = fs
	}
	seq := false
	for i, h := range fs.heads {
		if h == off {
			seq = true
			fs.heads[i] = off + int64(n)
			break
		}
	}
	if !seq {
		fs.heads[fs.next] = off + int64(n)
		fs.next = (fs.next + 1) % streamHeads
	}
	s := d.p.Service(write, seq, n)
	start := d.free
	if now.After(start) {
		start = now
	}
	d.free = start.Add(s)
	d.logAdmit(now)
	d.stats.Requests++
	d.stats.Bytes += uint64(n)
	d.stats.Busy += s
	if seq {
		d.stats.Sequential++
	}
	return d.free
}

// Wait admits the request and blocks until it completes.
func (d *Disk) Wait(write bool, file uint64, off int64, n int) {
	done := d.Admit(time.Now(), write, file, off, n)
	if w := time.Until(done); w > 0 {
		time.Sleep(w)
	}
}

// Stats returns a copy of the counters.
func (d *Disk) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}
