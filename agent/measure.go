package agent

import (
	"math"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/cost"
	"github.com/sanqos/sanqos/sample"
)

// The measure stage, apart from tick.go's other stages for its length:
// what each consumer moved this tick and how it loads the resource.

// measure is the measure stage: each consumer's rates, IOPS, waits,
// queue and load this tick, from its devices (rates from the wire when
// the agent samples TCP_INFO), into the policy's input rs.in, which the
// onset detector and the policy read; and the consumers' status rows.
func (l *Loops) measure(rs *resourceState, d devIntervals, rates map[netip.Addr]sample.Rate, now time.Time, thresholdMs float64) []ConsumerStatus {
	p, in := rs.plan, &rs.in
	*in = PolicyInput{Now: now, Interval: l.cfg.Interval, ThresholdMs: thresholdMs,
		DelayStep: l.cfg.DelayStep, MaxDelay: l.cfg.MaxDelay, WriteBps: l.cfg.WriteBps, BulkQueue: l.cfg.BulkQueue, ReadBps: l.cfg.ReadBps,
		Consumers:   grow(in.Consumers, len(p.consumers)), // each row written whole by measureConsumer
		settingsBuf: in.settingsBuf, thrBuf: in.thrBuf, plan: p}
	sts := rs.sts[:0] // publish copies it out under the lock
	for k := range p.consumers {
		pc := &p.consumers[k]
		var r sample.Rate
		wire := false
		if rates != nil {
			r, wire = rates[pc.addr]
		}
		ci := &in.Consumers[k] // in place: a row is 200 bytes
		l.measureConsumer(ci, pc, &p.loads[k], p.rates[k], &d, &r, wire)
		sts = append(sts, ConsumerStatus{Addr: pc.name, ReadBps: ci.ReadBps, WriteBps: ci.WriteBps, WriteEWMA: ci.WriteEWMA, Important: pc.important,
			Queue: ci.Queue, LoadRead: ci.Load.Read, LoadWrite: ci.Load.Write, SendSRTTMs: ms(r.SendSRTT)})
	}
	rs.sts = sts
	for _, pc := range p.static {
		in.Consumers = append(in.Consumers, ConsumerInput{Addr: pc.addr, Static: true, ReadWaitMs: math.NaN(), WriteWaitMs: math.NaN(),
			QueueMs: math.NaN(), SRTTMs: math.NaN()})
	}
	return sts
}

// measureConsumer sums one consumer's devices' intervals into ci and
// updates its smoothed write rate, queue, load and read rate. With wire,
// r (its TCP_INFO rates) replaces its devices' rates.
func (l *Loops) measureConsumer(ci *ConsumerInput, pc *planConsumer, load *loadEstimate, rate Smoother, d *devIntervals, r *sample.Rate, wire bool) {
	*ci = ConsumerInput{Addr: pc.addr, HasDevices: true, Important: pc.important, Static: pc.static}
	var rb, wb, rTicks, wTicks, nr, nw, secs, inFlight float64
	for _, i := range pc.devs {
		if i < 0 || !d.ok[i] {
			continue
		}
		iv := &d.iv[i]
		inFlight += float64(iv.InFlight)
		rb += iv.ReadBps
		wb += iv.WriteBps
		nr += float64(iv.Reads)
		nw += float64(iv.Writes)
		if iv.Reads > 0 {
			rTicks += iv.ReadWaitMs * float64(iv.Reads)
		}
		if iv.Writes > 0 {
			wTicks += iv.WriteWaitMs * float64(iv.Writes)
		}
		secs = max(secs, iv.Seconds)
	}
	ci.ReadWaitMs, ci.WriteWaitMs, ci.QueueMs, ci.SRTTMs = math.NaN(), math.NaN(), math.NaN(), math.NaN()
	// The queue and load are the devices' where the consumer has them
	// to itself; on shared devices they are everyone's (lab autonomic:
	// every initiator sees every LUN of the one target, and the reader
	// had the whole resource's queue of 13, so it was slowed with the
	// backup), so there, when the agent samples the wire, the queue is
	// Little's law on its own requests per direction (every request on
	// a device waits alike in its direction): its commands/s × the
	// devices' read wait + its share of their write bytes × their write
	// time/s, and the load is priced from its own bytes; without the
	// wire the queue is unknown (0: the queue rule does not apply). The
	// wire counts reads' commands exactly and writes' barely
	// (sample.commands), so commands count as reads and writes by bytes.
	// With both directions' mean wait, a one-at-a-time reader's 25
	// reads/s counted at the writes' 50 ms: 1.25, slowed (guest tgt lab;
	// TestSharedQueueRuleByDirection).
	//
	// On its own devices the queue is their requests in flight at the
	// tick (diskstats' in-progress field), which the 0.5 s smoothing
	// averages over five samples. It was Little's law over the completed
	// requests, Δ(read + write ticks) / Δt, which books a request's whole
	// wait in the tick it completes, and a short tick after a late one
	// weighs as a full one: a one-at-a-time reader's 45 ms reads counted
	// 1.3 (LIO guest, 1 of 4 runs; TestQueueRuleCountsRequestsInFlight)
	// and it joined the set for the whole regulation. In flight it never
	// counts more than 1. The weighted time in queue (field 11) is no
	// cure: since Linux 5.0 the kernel prints the completed requests'
	// times summed there too.
	var devLoad cost.Load
	var devQueue float64
	if secs > 0 {
		devLoad = l.cfg.Cost.Of(nr/secs, rb, nw/secs, wb)
		if pc.exclusive {
			devQueue = inFlight
		}
	}
	if wire && secs > 0 {
		r.Over(secs) // the wire's bytes over the devices' interval: one interval per tick
	}
	if wire && !pc.exclusive {
		devLoad = l.cfg.Cost.Bytes(r.ReadBps, r.WriteBps)
		if nr > 0 {
			devQueue = r.CommandsPerSec * rTicks / nr / 1e3
		}
		if wb > 0 && secs > 0 {
			devQueue += min(1, r.WriteBps/wb) * wTicks / secs / 1e3
		}
	}
	// Read commands a second from the read rate's own source: the
	// devices' reads, or the wire's commands (reads exactly, writes
	// barely: sample.commands).
	var readCmds float64
	if secs > 0 {
		readCmds = nr / secs
	}
	if wire {
		rb, wb, readCmds = r.ReadBps, r.WriteBps, r.CommandsPerSec
		if r.MinRTT > 0 {
			ci.QueueMs, ci.SRTTMs = ms(r.QueueDelay), ms(r.SRTT)
		}
		ci.DeliveryBps, ci.InFlight = r.DeliveryBps, r.InFlight
	}
	if nr > 0 {
		ci.ReadWaitMs = rTicks / nr
	}
	if nw > 0 {
		ci.WriteWaitMs = wTicks / nw
	}
	ci.ReadBps, ci.WriteBps = rb, wb
	if secs > 0 {
		ci.ReadIOPS, ci.WriteIOPS = nr/secs, nw/secs
		// Idle as the idle hold judges it (hold.go), so the estimate
		// rests exactly while the hold keeps the delays. Weighed by the
		// interval's length: the tick that comes at once after a late
		// one books a whole wait in a few ms (TestQueueWeighsTicksByLength).
		load.observe(time.Duration(math.Round(secs*1e9)), l.cfg.IdleHold, !idle(ci), devQueue, devLoad, rb, readCmds)
	}
	ci.Queue, ci.Load, ci.ReadEWMA, ci.ReadSize = load.queue, load.load, load.readBps, load.readSize()
	ci.WriteEWMA, _ = rate.Update(wb)
}
