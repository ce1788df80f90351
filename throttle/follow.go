package throttle

import "time"

// Why the delay line can follow the sender's srtt instead of ramping at a
// fixed rate: a Linux sender arms its tail-loss probe timer at
// 2·srtt + 2 ms whenever it sends new data (tcp_schedule_loss_probe), and
// the ACK for a segment leaves the target right after the segment came in.
// So an ACK whose delay stays under 2·srtt + 2 ms (less a margin for the
// base RTT and our own lateness) can never be late for the probe armed when
// its data was sent. The delay line sees every ACK (and, for reads, every
// data segment) it releases, so it can keep the same EWMA the sender keeps
// — counting a sample only when the packet has left, because that is when
// the sender sees it — and cap each packet's delay at the bound. The delay
// then grows by about ×1.3 per round trip from 1 ms: 1 → 40 ms in about ten
// round trips, where a fixed-rate ramp whose idle time does not count
// (ramp.go) needs one round trip per added ms.
//
// The model errs low, which only slows the rise: rises count one sample
// per ACK that acknowledges new data (a duplicate or window update does not
// move the sender's srtt), and one per two data segments for reads (the
// receiver ACKs every second segment); falls count every packet at 1/4, so
// the model's srtt falls faster than the sender's.

// followSlack is 2 ms (the probe timer's constant term) less a margin for
// what the model does not see: the base RTT, the peer's ACK delay and our
// release lateness.
const followSlack = 1 * time.Millisecond

// followSample is one released-later packet's delay, counted into the
// model's srtt once it has left (due).
type followSample struct {
	due, delay int64
	shift      uint8 // EWMA weight 1/2^shift
}

// follower models one flow direction's sender srtt from the delays the
// delay line applied to that flow's packets.
type follower struct {
	srtt    int64 // ns
	pending []followSample
	head    int
	ack     uint32 // highest ACK number seen (pure ACKs)
	acked   bool   // ack is set
	at      int64  // last packet, for forgetting idle flows
}

// cap returns the largest delay a packet at t may get: the model's srtt
// first takes every sample released by t.
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

// sent records a packet held from t until due. ack is its ACK number and
// pure says it carries no payload (the write direction's ACKs).
func (f *follower) sent(t, due int64, pure bool, ack uint32) {
	delay := due - t
	var shift uint8
	switch {
	case delay < f.srtt:
		shift = 2
	case !pure:
		shift = 4
	case !f.acked || int32(ack-f.ack) > 0:
		shift = 3
	default:
		return // no new data acknowledged: no sample for the sender
	}
	if pure && (!f.acked || int32(ack-f.ack) > 0) {
		f.ack, f.acked = ack, true
	}
	f.pending = append(f.pending, followSample{due, delay, shift})
}

// start sets the model of a new connection: its SYN-ACK's delay is the
// first RTT sample of both ends, and a first sample sets srtt outright.
func (f *follower) start(t, due int64) {
	*f = follower{srtt: due - t, at: t}
}
