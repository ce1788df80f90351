package agent

import (
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/cost"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// Who saturates a resource, in which direction (issue 30). The thesis
// slowed consumers that write more than throttleable_write_mb_s; a backup
// that reads, or VMs doing random reads and writes, never qualified and
// were never slowed. Two measurements per consumer make the set
// direction-blind:
//
//   - its queue: the mean number of its requests in the resource over the
//     last half second (diskstats' requests in flight at each tick),
//     where it has its devices to itself; on devices shared
//     with other consumers, Little's law on its own requests per
//     direction, since every request on a device waits alike: its
//     commands per second on the wire (sample.Rate.CommandsPerSec) × the
//     devices' read wait + its share of their write bytes × their write
//     time; without the wire the rule stays out (measure.go,
//     measureConsumer). A request waits behind what is queued ahead of it, so
//     the consumers that keep several requests queued are the ones that
//     make everyone else's reads wait. A latency-sensitive job with one
//     request at a time (the thesis' reader, a database's log reader)
//     stays below one however slow the resource gets; the lab's backup
//     host keeps ~4 queued, a VM's random I/O 2–4.
//   - its load per direction, in resource time (package cost), priced
//     from its devices' requests, or from its own bytes on the wire on
//     shared devices: which direction to slow, and how much of the
//     resource it takes (status).
//
// A consumer joins the set when its queue reaches throttleable_queue, or
// it reads more than throttleable_read_mb_s in large reads (a stream or
// two of large requests keeps under one request queued: a VM's 64 KiB
// I/O on two streams, simulator mixed, ~0.8 queued at 2.5 MB/s;
// BulkReadSize), or it writes more
// than throttleable_write_mb_s (the thesis' rule), or it is listed
// throttleable. It stays while the resource is being regulated, since
// the delay itself moves its queue out of the resource and onto the wire
// (a slowed backup's queue falls to ~1 as the controller works) and
// slows its rates; once regulation ends it leaves when no rule holds and
// its queue is under half the mark. Without that hold a writer near the
// rate threshold was slowed every other tick (simulator, mixed).

// loadSmoothing is the time constant of the queue and load estimates:
// five 100 ms ticks, so a qd-1 reader's smoothed queue stays under one
// (on shared devices, by Little's law, a request carried over from the
// last tick can push one tick's to 1.6 at 60 ms of wait; the lab's worst
// smoothed is 1.05; in flight on its own devices it is never over one)
// while a VM that starts is seen within half a second.
const loadSmoothing = 500 * time.Millisecond

// readRateSmoothing is the read rate's: two seconds, so that a
// rate-limited reader catching up after a stall is not taken for a bulk
// one (lab mixed: the 256 KiB/s reader read 1.2-1.3 MB/s for a second
// when the interferers stopped, and was slowed with them), while a backup
// host at 9 MB/s still crosses 1 MB/s within a quarter of a second.
const readRateSmoothing = 2 * time.Second

// loadEstimate smooths one consumer's queue, per-direction load and
// read rate.
type loadEstimate struct {
	queue, readBps float64
	readCmds       float64 // read commands a second, smoothed as readBps
	load           cost.Load
	seen           bool
	idleFor        time.Duration // since the consumer last moved data
}

// observe folds in one tick of dt: the consumer's queue q, load l and
// read rate, and whether it moved data. An idle tick leaves the estimate
// as it is for up to hold (idle_hold) of idleness; after that idle ticks
// count as any other and the estimate decays. An idle tick says nothing
// of how heavy the consumer is when it moves data: folded in, it emptied
// the estimate during a load's off period, so a mixed consumer back at
// the next step was out of the policy's set by the idle hold's fourth
// tick, was let go, and climbed again from 1 ms: its delays went 63-69 ms
// → 0 → 15 ms within half a second (lab mixed s1-r3-2bfc676), and every
// target probe of those runs fell in that second. Frozen (s1-x1/x2,
// 15 ms, no oracle), the delays ran through the steps and p95 was
// 1.13/1.08×. Bounded by the hold, so a consumer idle for longer is
// judged afresh when it returns, as the hold lets its delays go then too.
func (e *loadEstimate) observe(dt, hold time.Duration, moved bool, q float64, l cost.Load, readBps, readCmds float64) {
	if moved {
		e.idleFor = 0
	} else if e.idleFor += dt; e.idleFor <= hold {
		return
	}
	e.update(dt.Seconds(), q, l, readBps, readCmds)
}

// update folds one interval in: the consumer's queue q, load l, read
// rate and read commands a second over it, dt seconds after the last.
func (e *loadEstimate) update(dt, q float64, l cost.Load, readBps, readCmds float64) {
	if !e.seen {
		e.queue, e.load, e.readBps, e.readCmds, e.seen = q, l, readBps, readCmds, true
		return
	}
	a := dt / (dt + loadSmoothing.Seconds())
	e.queue += a * (q - e.queue)
	ar := dt / (dt + readRateSmoothing.Seconds())
	e.readBps += ar * (readBps - e.readBps)
	e.readCmds += ar * (readCmds - e.readCmds)
	e.load.Read += a * (l.Read - e.load.Read)
	e.load.Write += a * (l.Write - e.load.Write)
}

// readSize is the smoothed mean read (bytes; 0: no read commands seen).
func (e *loadEstimate) readSize() float64 {
	if !(e.readCmds > 0) {
		return 0
	}
	return e.readBps / e.readCmds
}

// indicatorReads sums the read time (ms) and reads of the devices the
// indicator measures this tick: with slowed (IndicatorUnthrottled; by
// consumer index, nil: nobody), the measured devices that some consumer
// outside slowed uses, or all of them when every measured device is used
// only by slowed consumers.
func indicatorReads(p *plan, ivs []sample.Interval, ok []bool, slowed []bool) (ticks, reads float64) {
	keep := func(i int) bool {
		if slowed == nil || len(p.users[i]) == 0 {
			return true
		}
		for _, k := range p.users[i] {
			if !slowed[k] {
				return true
			}
		}
		return false
	}
	kept := 0
	for _, i := range p.measured {
		if keep(i) {
			kept++
		}
	}
	for _, i := range p.measured {
		if iv := &ivs[i]; ok[i] && iv.Reads > 0 && (kept == 0 || keep(i)) {
			ticks += iv.ReadWaitMs * float64(iv.Reads)
			reads += float64(iv.Reads)
		}
	}
	return ticks, reads
}

// bulkSet is a policy's memory of who saturates the resource: last
// tick's members (was) and this tick's (is) by consumer index, and
// their addresses for a tick whose consumers are laid out anew (a map
// by address, cleared and refilled every tick, cost a tenth of a tick).
type bulkSet struct {
	was, is []bool
	addrs   []netip.Addr // last tick's members
	at      *plan        // whose layout was and is follow
}

// tick starts a tick on in's consumers: those not in it are forgotten.
func (s *bulkSet) tick(in *PolicyInput) {
	n, was := len(in.Consumers), s.is
	if in.plan == nil || in.plan != s.at || len(was) != n {
		member := make(map[netip.Addr]bool, len(s.addrs))
		for _, a := range s.addrs {
			member[a] = true
		}
		was = grow(was, n)
		for k := range in.Consumers {
			was[k] = member[in.Consumers[k].Addr]
		}
	}
	s.was, s.is, s.at, s.addrs = was, grow(s.was, n), in.plan, s.addrs[:0]
	clear(s.is)
}

// member says whether c, in.Consumers[k], is throttleable this tick
// (see above).
func (s *bulkSet) member(k int, c *ConsumerInput, in *PolicyInput) bool {
	if c.Important {
		return false
	}
	mark := in.BulkQueue
	rule := c.Static || c.WriteEWMA > in.WriteBps || saturates(c, mark, in.ReadBps)
	is := rule || ((in.Output > 0 || (mark > 0 && c.Queue >= mark/2)) && s.was[k])
	if is {
		s.is[k], s.addrs = true, append(s.addrs, c.Addr)
	}
	return is
}

// saturates is the direction-blind part of the rules: a queue at the
// mark or a read rate above readBps (either 0: that rule is off). The
// policy's set and the onset detector's signal both ask it.
func saturates(c *ConsumerInput, mark, readBps float64) bool {
	return readsInBulk(c, readBps) || (mark > 0 && c.Queue >= mark)
}

// BulkReadSize is the mean read at and above which the read-rate rule
// takes a consumer's reads for bulk ones. The rule is there for a stream
// or two of large reads (a backup's 64 KiB and more, a checkpoint's), which
// keep under one request queued; a consumer of small reads one at a time
// moves as many bytes as its latency lets it, which is what the agent
// protects: the LIO guest's reader (8 KiB, one at a time) was taken for a
// bulk reader at 1.13 MB/s and slowed to 90 ms (initiator p95 16.87× the
// threshold, run ab-lio-9ae35fe). Small reads many at a time meet the
// queue rule.
const BulkReadSize = 32 << 10

// readsInBulk is the read-rate rule: a read rate above readBps (0: off)
// in reads of BulkReadSize or more on average (ReadSize 0: unknown, the
// rate alone decides).
func readsInBulk(c *ConsumerInput, readBps float64) bool {
	return readBps > 0 && c.ReadEWMA > readBps && (c.ReadSize == 0 || c.ReadSize >= BulkReadSize)
}

// directed is the setting that slows c by d in the directions it loads
// the resource, each rounded up to whole steps. A consumer with no
// measured load on the devices (rates from the wire only, or a static
// one discovery has not seen) is slowed in the direction it moves the
// more bytes, a write delay when it moves none.
func directed(c ConsumerInput, d time.Duration, in *PolicyInput) throttle.Setting {
	if c.Load.Total() <= 0 {
		if c.ReadBps > c.WriteBps {
			return throttle.Setting{ReadDelay: d}
		}
		return throttle.Setting{WriteDelay: d}
	}
	if d >= in.MaxDelay {
		// The controller is pinned and the threshold still missed: the
		// other direction is the next lever (issue 30). With write delays
		// on replies both fall on the same segments and this changes
		// nothing; with the thesis' ACKs it adds the replies.
		return throttle.Setting{ReadDelay: in.MaxDelay, WriteDelay: in.MaxDelay}
	}
	r, w := c.Load.Split(d)
	return throttle.Setting{ReadDelay: roundUpStep(r, in.DelayStep, in.MaxDelay), WriteDelay: roundUpStep(w, in.DelayStep, in.MaxDelay)}
}
