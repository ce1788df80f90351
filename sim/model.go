// Package sim is a deterministic discrete-event model of an iSCSI storage
// network, built to run the real sanqos controller faster than real time:
// initiators (closed-loop jobs with iodepth, block size, rate caps and
// on/off schedules), TCP connections whose request round trips grow with
// the per-packet delay the throttle adds, and shared resources (one FIFO
// queue each, disk-like service times, optional write cache).
//
// The simulator replaces the kernel, not the controller: it implements
// agent.Sampler (synthesised /proc/diskstats counters) and
// throttle.Throttle (recorded settings feed the TCP model), and drives the
// agent's own pipeline with agent.Agent.Step under a virtual clock. It must
// not reimplement any control logic, read the wall clock inside a model
// run, touch the kernel, or need root. Same seed, same result: every
// random choice comes from one seeded math/rand/v2 source and ties in the
// event queue break by insertion order.
//
// For many agents (cluster_scale.go) it also models etcd and the
// goroutines of a cluster.Node around package cluster's own per-tick
// rules; it never starts an etcd or talks to one.
//
// Imports (sanqos): agent, cluster, config, control, report, sample,
// throttle.
package sim

import (
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/sample"
)

// Params are the model's physical constants. Defaults mirror the lab's
// modelled disk group (lab/diskmodel) and its TCP behaviour; Calibrate fits
// them to a lab run.
type Params struct {
	// Disk: service = Overhead + (sequential ? 0 : Seek) +
	// bytes/BandwidthBps × (write ? WriteCost : 1), one request at a time.
	Overhead     time.Duration `json:"overhead_ns"`
	Seek         time.Duration `json:"seek_ns"`
	BandwidthBps float64       `json:"bandwidth_bps"`
	WriteCost    float64       `json:"write_cost"`
	// DeviceLatency is time a request spends in the block stack (loop
	// device, FUSE) on top of the disk queue: the device's wait counts it,
	// the disk is not busy during it.
	DeviceLatency time.Duration `json:"device_latency_ns"`
	// WriteCacheBytes, if > 0, acknowledges writes after Overhead while
	// the cache has room; the cached data is destaged through the same
	// queue (a write-back controller cache).
	WriteCacheBytes int64 `json:"write_cache_bytes"`
	// Jitter spreads each service time uniformly over ±Jitter of itself
	// (a real group's rotational and stripe variance).
	Jitter float64 `json:"jitter"`
	// Network: a request's transfer takes RTT + bytes/NetBps, plus one
	// added delay per window of data: bytes/Window rounds, at least one (the TCP window
	// or credit model; the delay on ACKs (writes) or data (reads) holds
	// back each window once).
	RTT         time.Duration `json:"rtt_ns"`
	ReadNetBps  float64       `json:"read_net_bps"`
	WriteNetBps float64       `json:"write_net_bps"`
	ReadWindow  float64       `json:"read_window_bytes"`
	WriteWindow float64       `json:"write_window_bytes"`
	// ReadStall and ReadStallProb give reads an additive tail: while
	// another consumer's job is active on the resource, each read is held
	// ReadStall (± Jitter) longer in the block stack with probability
	// ReadStallProb, as if queued behind one interferer request whose
	// service does not shrink when the interferers are delayed. The lab's
	// reader at 15 ms has such a tail (docs/interferers.md, "Why the 15 ms
	// runs wander": mean 13.6 → 9.0 ms, per-interval p95 18.0 → 15.6 ms);
	// the queue above alone gives a tail that scales with the mean. 0 (the
	// default) draws nothing, so existing runs replay unchanged.
	ReadStall     time.Duration `json:"read_stall_ns,omitempty"`
	ReadStallProb float64       `json:"read_stall_prob,omitempty"`
	// ReadStallDelay, if > 0, scales ReadStallProb by the largest write
	// delay applied to the other consumers over ReadStallDelay (capped at
	// probability 1): a tail that grows as the writers are slowed (the
	// delayed ACKs release each writer's window in one burst), so the
	// per-interval p95 falls slower than the mean.
	ReadStallDelay time.Duration `json:"read_stall_delay_ns,omitempty"`
}

// DefaultParams are the lab's disk model (0.2 ms, 5 ms, 40 MB/s) with
// the rest as `sanqos-lab sim calibrate` fitted them to this lab's runs
// (results/interference/20261122-000556, delay-sweep/20261122-001316:
// mean |p95 error| 1.6 % on interference), so that `sanqos-lab sim NAME`
// resembles the lab without a calibration step.
func DefaultParams() Params {
	return Params{
		Overhead: 200 * time.Microsecond, Seek: 5 * time.Millisecond, BandwidthBps: 40e6, WriteCost: 1.968,
		DeviceLatency: 743 * time.Microsecond, Jitter: 0.2,
		RTT: 100 * time.Microsecond, ReadNetBps: 1310.72e6, WriteNetBps: 102.67e6,
		ReadWindow: 61551, WriteWindow: 20017,
	}
}

// service is the disk's time for one request.
func (p Params) service(write, seq bool, bytes int) time.Duration {
	s := float64(p.Overhead)
	if !seq {
		s += float64(p.Seek)
	}
	c := 1.0
	if write {
		c = p.WriteCost
	}
	return time.Duration(s + float64(bytes)/p.BandwidthBps*c*1e9)
}

// transfer is the network time of a request's data with added delay d.
func (p Params) transfer(write bool, bytes int, d time.Duration) time.Duration {
	bps, win := p.ReadNetBps, p.ReadWindow
	if write {
		bps, win = p.WriteNetBps, p.WriteWindow
	}
	// A delay holds every packet of the request's exchange, so even a
	// request smaller than the window waits it once (an 8 KiB read under
	// 20 ms was charged 2.7 ms before).
	return p.RTT + time.Duration(float64(bytes)/bps*1e9) + time.Duration(max(1, float64(bytes)/win)*float64(d))
}

// Resource is one shared pool: one FIFO queue serving its devices.
type Resource struct {
	Name    string
	Devices []string
}

type device struct {
	name     string
	res      int
	reads    uint64
	writes   uint64
	rsect    uint64
	wsect    uint64
	rns      int64 // ns spent by completed reads (diskstats' ticks, before ms)
	wns      int64
	inflight uint64
}

type request struct {
	job     int
	write   bool
	seq     bool
	bytes   int
	arrived time.Duration // at the device
	cached  bool          // destage of a cached write (no job waits)
}

type disk struct {
	queue    []*request
	busy     bool
	cacheUse int64
	// free is when the disk will have served its queue (the nominal
	// service of those not started, the drawn one of the head).
	free time.Duration
}

type evKind uint8

const (
	evIssue    evKind = iota // a job slot issues its next request
	evArrive                 // a request reaches the device
	evDone                   // the disk finishes the head of a queue
	evComplete               // the device completes a request (after DeviceLatency)
	evFinish                 // the job sees the completion (after the read data)
)

type event struct {
	at   time.Duration
	kind evKind
	res  int
	req  *request
	slot int
}

// Model is one simulated target: resources, devices, jobs and the
// throttle settings the controller applied.
type Model struct {
	P     Params
	Epoch time.Time // virtual time 0 as a time.Time (counter timestamps)

	now    time.Duration
	events timeline[event]
	rng    *rand.Rand
	disks  []disk
	devs   []device
	devIdx map[string]int
	snap   []sample.Counters // Snapshot's, reused
	jobs   []*Job
	jobDev []int
	nextAt []time.Duration // rate cap: earliest next issue per job
	thr    *Throttle
	// Per-consumer bytes on the wire (what TCP_INFO reports): written
	// counts when a write's data has reached the target, read when a
	// read's data has reached the initiator.
	wire     map[netip.Addr]*wireBytes
	lastRate time.Duration
	// Queue is the first resource's queue at each arrival (the lab's
	// disk model logs the same), for the onset's floor.
	Queue report.Backlog
}

// wireBytes is a consumer's traffic; shaperFree is when its write-rate
// cap (an HTB class on the target's ingress) has sent everything queued.
type wireBytes struct {
	read, write, lastRead, lastWrite uint64
	shaperFree                       time.Duration
}

// NewModel builds a model; seed fixes every random choice.
func NewModel(p Params, seed uint64, res []Resource, jobs []*Job) *Model {
	m := &Model{P: p, Epoch: time.Unix(1_700_000_000, 0).UTC(), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		devIdx: map[string]int{}, thr: NewThrottle(), wire: map[netip.Addr]*wireBytes{}}
	m.disks = make([]disk, len(res))
	for ri, r := range res {
		for _, d := range r.Devices {
			m.devIdx[d] = len(m.devs)
			m.devs = append(m.devs, device{name: d, res: ri})
		}
	}
	m.jobs = jobs
	m.jobDev = make([]int, len(jobs))
	m.nextAt = make([]time.Duration, len(jobs))
	for i, j := range jobs {
		m.jobDev[i] = m.devIdx[j.Device]
		if m.wire[j.Consumer] == nil {
			m.wire[j.Consumer] = &wireBytes{}
		}
		for s := 0; s < max(1, j.IODepth); s++ {
			if t := j.nextActive(0); t >= 0 {
				// Spread the slots' first issues over 1 ms so equal jobs
				// do not move in lockstep.
				m.push(event{at: t + time.Duration(m.rng.Int64N(int64(time.Millisecond))), kind: evIssue, slot: i})
			}
		}
	}
	return m
}

// Throttle returns the model's throttle (what the agent drives).
func (m *Model) Throttle() *Throttle { return m.thr }

// Now is the virtual time since the start.
func (m *Model) Now() time.Duration { return m.now }

func (m *Model) push(e event) { m.events.push(e.at, e) }

// RunUntil processes every event up to and including virtual time t.
func (m *Model) RunUntil(t time.Duration) {
	for at, ok := m.events.next(); ok && at <= t; at, ok = m.events.next() {
		_, e := m.events.pop()
		m.now = e.at
		m.handle(e)
	}
	m.now = t
}

func (m *Model) handle(e event) {
	switch e.kind {
	case evIssue:
		m.issue(e.slot)
	case evArrive:
		m.arrive(e.req)
	case evDone:
		m.done(e.res)
	case evComplete:
		m.complete(e.req)
	case evFinish:
		m.finish(e.req)
	}
}

func (m *Model) issue(ji int) {
	j := m.jobs[ji]
	t := m.now
	if !j.active(t) {
		if n := j.nextActive(t); n >= 0 {
			m.push(event{at: n, kind: evIssue, slot: ji})
		}
		return
	}
	if j.RateBps > 0 && m.nextAt[ji] > t {
		m.push(event{at: m.nextAt[ji], kind: evIssue, slot: ji})
		return
	}
	if j.RateBps > 0 {
		// fio's rate: issue on a fixed schedule; a late request may be
		// caught up by one period, not by a burst.
		period := time.Duration(float64(j.BS) / j.RateBps * 1e9)
		m.nextAt[ji] = max(m.nextAt[ji], t-period) + period
	}
	r := &request{job: ji, write: m.isWrite(j), seq: !j.Random, bytes: j.BS}
	if r.write {
		// The data crosses the network first; delayed ACKs hold it back,
		// and a write-rate cap passes the consumer's bytes one after
		// another at its rate, shared by all the consumer's jobs.
		s := m.thr.get(j.Consumer)
		at := t + m.P.transfer(true, j.BS, s.WriteDelay)
		if s.WriteRate > 0 {
			w := m.wire[j.Consumer]
			w.shaperFree = max(w.shaperFree, t) + time.Duration(float64(j.BS)/float64(s.WriteRate)*1e9)
			at = max(at, w.shaperFree)
		}
		m.push(event{at: at, kind: evArrive, req: r})
	} else {
		m.push(event{at: t + m.P.RTT/2, kind: evArrive, req: r})
	}
}

// isWrite decides a request's direction; each direction then takes its
// own path through the TCP model (a write's data waits for delayed ACKs,
// a read's data is delayed on its way back), mixed or not.
func (m *Model) isWrite(j *Job) bool {
	switch {
	case j.ReadFraction <= 0:
		return j.Write
	case j.ReadFraction >= 1:
		return false
	}
	return m.rng.Float64() >= j.ReadFraction
}

func (m *Model) arrive(r *request) {
	r.arrived = m.now
	if r.write {
		m.wire[m.jobs[r.job].Consumer].write += uint64(r.bytes)
	}
	di := m.jobDev[r.job]
	m.devs[di].inflight++
	ri := m.devs[di].res
	dk := &m.disks[ri]
	if r.write && m.P.WriteCacheBytes > 0 && dk.cacheUse+int64(r.bytes) <= m.P.WriteCacheBytes {
		dk.cacheUse += int64(r.bytes)
		m.push(event{at: m.now + m.P.Overhead, kind: evComplete, req: r})
		r = &request{job: r.job, write: true, seq: r.seq, bytes: r.bytes, cached: true}
	}
	dk.queue = append(dk.queue, r)
	dk.free = max(dk.free, m.now) + m.P.service(r.write, r.seq, r.bytes)
	if ri == 0 {
		m.Queue.At, m.Queue.Until = append(m.Queue.At, m.now.Seconds()), append(m.Queue.Until, dk.free.Seconds())
	}
	if !dk.busy {
		m.startNext(ri)
	}
}

func (m *Model) startNext(ri int) {
	dk := &m.disks[ri]
	if len(dk.queue) == 0 {
		dk.busy = false
		return
	}
	dk.busy = true
	r := dk.queue[0]
	s := m.P.service(r.write, r.seq, r.bytes)
	if m.P.Jitter > 0 {
		n := s
		s = time.Duration(float64(s) * (1 + m.P.Jitter*(2*m.rng.Float64()-1)))
		dk.free += s - n
	}
	m.push(event{at: m.now + s, kind: evDone, res: ri})
}

func (m *Model) done(ri int) {
	dk := &m.disks[ri]
	r := dk.queue[0]
	dk.queue[0] = nil
	dk.queue = dk.queue[1:]
	if r.cached {
		dk.cacheUse -= int64(r.bytes)
	} else {
		m.push(event{at: m.now + m.P.DeviceLatency + m.stall(r, ri), kind: evComplete, req: r})
	}
	m.startNext(ri)
}

func (m *Model) complete(r *request) {
	dv := &m.devs[m.jobDev[r.job]]
	dv.inflight--
	lat := int64(m.now - r.arrived)
	if r.write {
		dv.writes++
		dv.wsect += uint64(r.bytes / 512)
		dv.wns += lat
		m.push(event{at: m.now + m.P.RTT/2, kind: evFinish, req: r})
		return
	}
	dv.reads++
	dv.rsect += uint64(r.bytes / 512)
	dv.rns += lat
	// The data goes back to the initiator; delaying it slows reads.
	d := m.thr.get(m.jobs[r.job].Consumer).ReadDelay
	m.push(event{at: m.now + m.P.transfer(false, r.bytes, d), kind: evFinish, req: r})
}

func (m *Model) finish(r *request) {
	if !r.write {
		m.wire[m.jobs[r.job].Consumer].read += uint64(r.bytes)
	}
	m.push(event{at: m.now, kind: evIssue, slot: r.job})
}

// Sample implements agent.RateSampler: each consumer's read and write
// rate on the wire since the previous Sample, as the agent gets them
// from the target's TCP connections in target mode.
func (m *Model) Sample() (map[netip.Addr]sample.Rate, error) {
	dt := (m.now - m.lastRate).Seconds()
	m.lastRate = m.now
	out := make(map[netip.Addr]sample.Rate, len(m.wire))
	for a, w := range m.wire {
		r := sample.Rate{Conns: 1, SRTT: m.P.RTT}
		if dt > 0 {
			r.ReadBps, r.WriteBps = float64(w.read-w.lastRead)/dt, float64(w.write-w.lastWrite)/dt
		}
		w.lastRead, w.lastWrite = w.read, w.write
		out[a] = r
	}
	return out, nil
}

// Read implements agent.Sampler: the devices' cumulative diskstats
// counters at the current virtual time (ticks in whole ms, as the kernel
// prints them).
func (m *Model) Read(names ...string) (map[string]sample.Counters, error) {
	at := m.Epoch.Add(m.now)
	out := make(map[string]sample.Counters, len(m.devs))
	if len(names) == 0 {
		for i := range m.devs {
			out[m.devs[i].name] = m.devs[i].counters(at)
		}
		return out, nil
	}
	for _, n := range names {
		if i, ok := m.devIdx[n]; ok {
			out[n] = m.devs[i].counters(at)
		}
	}
	return out, nil
}

// Snapshot implements agent.Snapshotter: Read's counters of every
// device, in the model's order, which never changes (layout 1), in a
// slice the next call reuses.
func (m *Model) Snapshot() ([]sample.Counters, uint64, error) {
	at := m.Epoch.Add(m.now)
	m.snap = m.snap[:0]
	for i := range m.devs {
		m.snap = append(m.snap, m.devs[i].counters(at))
	}
	return m.snap, 1, nil
}

func (d *device) counters(at time.Time) sample.Counters {
	return sample.Counters{Device: d.name, Time: at, Reads: d.reads, ReadSectors: d.rsect, ReadTicks: uint64(d.rns / 1e6),
		Writes: d.writes, WriteSectors: d.wsect, WriteTicks: uint64(d.wns / 1e6), InFlight: d.inflight}
}
