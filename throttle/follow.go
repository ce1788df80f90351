package throttle

import "time"

// Why the delay line follows the sender's srtt: a Linux sender arms its tail-loss probe timer at
// 2·srtt + 2 ms whenever it sends new data (tcp_schedule_loss_probe), and
// the ACK for a segment leaves the target right after the segment came in.
// So an ACK whose delay stays under 2·srtt + 2 ms (less a margin for the
// base RTT and our own lateness) can never be late for the probe armed when
// its data was sent. The delay line sees every packet it releases, so it
// can keep the EWMAs both ends keep — counting a sample only when the
// packet has left, because that is when the sender sees it — and cap each
// packet's delay at the bound. A writer's delay then grows by about ×1.8
// per round trip from 1 ms, where a fixed-rate ramp whose idle time does
// not count (the delay_ramp this replaced) needed one round trip per
// added ms, and let load steps through (lab: p95 1.5–2.2 × the
// threshold).
//
// Two models per connection, one per sender:
//   - the consumer's srtt (it sends the writes): a sample, 1/8, for every
//     packet toward it that acknowledges new data, pure ACK or segment
//     with payload (duplicates and window updates move no srtt);
//   - ours toward it (we send the reads): a sample, 1/16, per segment with
//     payload, since the consumer ACKs every second one.
//
// A pure ACK is capped by the consumer's model, a segment with payload by
// ours and, if it acknowledges new data, by the consumer's too. The models
// err low, which only slows the rise: a sample's delay is at most the RTT
// the sender measures (which adds the base RTT and the time the peer took
// to answer), and falls count at 1/4, so a model falls faster than its
// sender's srtt. Packets that acknowledge nothing new are no sample of the
// consumer's srtt, and must not be: an iSCSI writer's responses and R2Ts
// (payload, read delay 0) pass undelayed when nothing of theirs is held,
// and counting them as falls kept the writers' caps near 1 ms (lab: p95
// 2.2 × the threshold).

// followSlack is 2 ms (the probe timer's constant term) less a margin for
// what the model does not see: the base RTT, the peer's ACK delay and our
// release lateness.
const followSlack = 1 * time.Millisecond

// followSample is one packet's delay, counted into a model once the packet
// has left (due).
type followSample struct {
	due, delay int64
	shift      uint8 // EWMA weight 1/2^shift
}

// follower models one sender's srtt from the delays the delay line applied.
type follower struct {
	srtt    int64 // ns
	pending []followSample
	head    int
	at      int64 // last packet, for forgetting idle flows
}

// cap returns the largest delay a packet at t may get: the model first
// takes every sample released by t.
func (f *follower) cap(t int64) int64 {
	for f.head < len(f.pending) && f.pending[f.head].due <= t {
		s := f.pending[f.head]
		f.srtt += (s.delay - f.srtt) >> s.shift
		f.head++
	}
	if f.head == len(f.pending) {
		f.pending, f.head = f.pending[:0], 0
	} else if f.head > 64 && f.head*2 > len(f.pending) {
		f.pending = append(f.pending[:0], f.pending[f.head:]...)
		f.head = 0
	}
	f.at = t
	return 2*f.srtt + int64(followSlack)
}

// sample records a packet held from t until due as a sample of weight
// 1/2^rise if it raises the model, 1/4 if it lowers it.
func (f *follower) sample(t, due int64, rise uint8) {
	delay := due - t
	if delay < f.srtt {
		rise = 2
	}
	f.pending = append(f.pending, followSample{due, delay, rise})
}

// start sets the model of a new connection: its SYN-ACK's delay is the
// first RTT sample of both ends, and a first sample sets srtt outright.
func (f *follower) start(t, due int64) {
	*f = follower{srtt: due - t, at: t}
}

// follow is one connection's pair of models and the highest ACK number
// seen toward the consumer.
type follow struct {
	peer, us follower
	ack      uint32
	acked    bool
}

func (fl *follow) advances(ack uint32) bool { return !fl.acked || int32(ack-fl.ack) > 0 }

// limit returns the delay for a packet of kind at t whose setting is
// target and whose ACK number is ack.
func (fl *follow) limit(kind pktKind, target time.Duration, t int64, ack uint32) time.Duration {
	if kind == kindSynAck {
		return target
	}
	c := fl.peer.cap(t)
	if kind == kindData {
		if u := fl.us.cap(t); fl.advances(ack) {
			c = min(c, u)
		} else {
			c = u
		}
	}
	return min(target, time.Duration(c))
}

// held records that the packet left at due.
func (fl *follow) held(kind pktKind, t, due int64, ack uint32) {
	if kind == kindSynAck {
		fl.peer.start(t, due)
		fl.us.start(t, due)
		fl.ack, fl.acked = ack, true
		return
	}
	if fl.advances(ack) {
		fl.ack, fl.acked = ack, true
		fl.peer.sample(t, due, 3)
	}
	if kind == kindData {
		fl.us.sample(t, due, 4)
	}
}

func (fl *follow) last() int64 { return max(fl.peer.at, fl.us.at) }

// flowIdle is how long a flow may send nothing before its model is
// forgotten; sweepFlows looks at most once per flowIdle.
const flowIdle = 10 * time.Second

// sweepFlows forgets the models of flows idle for flowIdle, so closed
// connections do not accumulate. A flow that comes back starts from zero,
// as a new connection would. d.mu must be held.
func (d *DelayLine) sweepFlows(t int64) {
	if t-d.swept < int64(flowIdle) {
		return
	}
	d.swept = t
	for k, r := range d.flows {
		if t-r.last() >= int64(flowIdle) {
			delete(d.flows, k)
		}
	}
}
