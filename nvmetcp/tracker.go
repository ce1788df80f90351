package nvmetcp

import (
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/iscsipdu"
)

// Flow is one NVMe/TCP connection (one queue): host (Initiator) and
// controller port (Target).
type Flow = iscsipdu.Flow

// Op is what a command did to the namespace.
type Op = iscsipdu.Op

// Ops.
const (
	OpOther = iscsipdu.OpOther
	OpRead  = iscsipdu.OpRead
	OpWrite = iscsipdu.OpWrite
)

// Sample is one completed command.
type Sample struct {
	Host    netip.Addr
	QID     int // -1: the queue's Connect was not seen
	NSID    uint32
	Op      Op
	Opcode  byte
	CID     uint16
	Status  uint16 // 0 success (and for a C2HData SUCCESS)
	Latency time.Duration
	At      time.Time
}

// Key groups samples: latency per host, namespace and read/write.
type Key struct {
	Host netip.Addr
	NSID uint32
	Op   Op
}

// Stat is one key's latency since the last TakeStats.
type Stat = iscsipdu.Stat

// Options configure a Tracker.
type Options struct {
	MaxPDU         int // 0: DefaultMaxPDU
	MaxOutstanding int // per connection (0: 4096, above any queue depth)
	MaxFlows       int // 0: 65536
}

// Counters are a Tracker's cumulative counts, for diagnostics.
type Counters struct {
	Commands, Completed int
	Unmatched           int // completions whose CID no command had
	Dropped             int // commands not remembered (table full)
	Expired             int // commands never answered
	Resyncs             int // bytes skipped resynchronising
	FlowsRefused        int
	Connects            int // Fabrics Connect commands read
	R2Ts                int // ready-to-transfer PDUs (the writers' lever)
	// DataSuccess counts commands completed by a C2HData with SUCCESS,
	// no response capsule.
	DataSuccess int
}

type pending struct {
	nsid   uint32
	op     Op
	opcode byte
	at     time.Time
}

type conn struct {
	toTarget, toInitiator *stream
	out                   map[uint16]pending
	last                  time.Time
	dig                   Digests
	connect               *Connect
}

// Tracker times commands on many connections and remembers each
// connection's Connect. Not safe for concurrent use: a capture loop owns
// it.
type Tracker struct {
	o         Options
	flows     map[Flow]*conn
	stats     map[Key]Stat
	emit      func(Sample)
	onConnect func(Flow, Connect)
	c         Counters
}

var _ iscsipdu.Gapper = (*Tracker)(nil)

// NewTracker returns a tracker; emit (optional) sees every sample.
func NewTracker(o Options, emit func(Sample)) *Tracker {
	if o.MaxOutstanding <= 0 {
		o.MaxOutstanding = 4096
	}
	if o.MaxFlows <= 0 {
		o.MaxFlows = 65536
	}
	return &Tracker{o: o, flows: map[Flow]*conn{}, stats: map[Key]Stat{}, emit: emit}
}

// OnConnect sets a function called with every Connect command read.
func (t *Tracker) OnConnect(f func(Flow, Connect)) { t.onConnect = f }

// Feed parses one segment's payload of flow f in direction d, seen at ts.
func (t *Tracker) Feed(f Flow, d Direction, payload []byte, ts time.Time) {
	c := t.flows[f]
	if c == nil {
		if len(t.flows) >= t.o.MaxFlows {
			t.c.FlowsRefused++
			return
		}
		c = &conn{out: map[uint16]pending{}}
		c.toTarget, c.toInitiator = newStream(ToTarget, t.o.MaxPDU, nil), newStream(ToInitiator, t.o.MaxPDU, nil)
		t.flows[f] = c
	}
	c.last = ts
	s := c.toTarget
	if d == ToInitiator {
		s = c.toInitiator
	}
	before := s.Resyncs
	s.feed(payload, func(h Header, pdu []byte) { t.header(f, c, h, pdu, ts) })
	t.c.Resyncs += s.Resyncs - before
}

// Gap tells the tracker bytes of f's direction d were lost: the stream
// looks for the next header. Outstanding commands stay.
func (t *Tracker) Gap(f Flow, d Direction) {
	c := t.flows[f]
	if c == nil {
		return
	}
	s := c.toTarget
	if d == ToInitiator {
		s = c.toInitiator
	}
	s.buf, s.skip, s.synced = s.buf[:0], 0, false
}

// header handles one PDU header (pdu: the whole PDU of a Connect).
func (t *Tracker) header(f Flow, c *conn, h Header, pdu []byte, ts time.Time) {
	switch {
	case h.Type == TypeICResp:
		// The controller's answer is what both sides use from now on.
		c.dig = h.Digests
		c.toTarget.dig, c.toInitiator.dig = &c.dig, &c.dig
	case h.Type == TypeR2T:
		t.c.R2Ts++
	case h.Type == TypeCapsuleCmd:
		t.command(f, c, h, pdu, ts)
	case h.Completes():
		if t.complete(f, c, h.CID, h.Status, ts) && h.Type == TypeC2HData {
			t.c.DataSuccess++
		}
	}
}

func (t *Tracker) command(f Flow, c *conn, h Header, pdu []byte, ts time.Time) {
	t.c.Commands++
	if h.IsConnect() {
		if cn, ok := ParseConnect(h, inCapsule(h, pdu)); ok {
			t.c.Connects++
			c.connect = &cn
			if t.onConnect != nil {
				t.onConnect(f, cn)
			}
		}
	}
	if _, dup := c.out[h.CID]; !dup && len(c.out) >= t.o.MaxOutstanding {
		t.c.Dropped++
		return
	}
	c.out[h.CID] = pending{nsid: h.NSID, op: c.classify(h.Opcode), opcode: h.Opcode, at: ts}
}

// classify names an I/O queue's Read and Write. On the admin queue (qid
// 0) opcode 0x02 is Get Log Page, not a read; a queue whose Connect was
// not seen is taken for an I/O queue, which is what nearly all traffic
// is.
func (c *conn) classify(opcode byte) Op {
	if c.connect != nil && c.connect.QID == 0 {
		return OpOther
	}
	switch opcode {
	case OpcodeRead:
		return OpRead
	case OpcodeWrite:
		return OpWrite
	}
	return OpOther
}

// complete ends command cid, if it was seen.
func (t *Tracker) complete(f Flow, c *conn, cid, status uint16, ts time.Time) bool {
	p, ok := c.out[cid]
	if !ok {
		t.c.Unmatched++
		return false
	}
	delete(c.out, cid)
	t.c.Completed++
	qid := -1
	if c.connect != nil {
		qid = int(c.connect.QID)
	}
	s := Sample{Host: f.Initiator.Addr(), QID: qid, NSID: p.nsid, Op: p.op, Opcode: p.opcode, CID: cid, Status: status, Latency: ts.Sub(p.at), At: ts}
	k := Key{s.Host, s.NSID, s.Op}
	st := t.stats[k]
	st.Count++
	st.Sum += s.Latency
	st.Max = max(st.Max, s.Latency)
	t.stats[k] = st
	if t.emit != nil {
		t.emit(s)
	}
	return true
}

// TakeStats returns the latencies since the last call and starts anew.
func (t *Tracker) TakeStats() map[Key]Stat {
	s := t.stats
	t.stats = map[Key]Stat{}
	return s
}

// Counters returns the cumulative counters.
func (t *Tracker) Counters() Counters { return t.c }

// Connections returns the Connect of every open connection that sent
// one: which host uses which subsystem on which queue.
func (t *Tracker) Connections() map[Flow]Connect {
	out := map[Flow]Connect{}
	for f, c := range t.flows {
		if c.connect != nil {
			out[f] = *c.connect
		}
	}
	return out
}

// Close forgets a connection (FIN or RST seen).
func (t *Tracker) Close(f Flow) {
	if c := t.flows[f]; c != nil {
		t.c.Expired += len(c.out)
		delete(t.flows, f)
	}
}

// Expire forgets commands older than maxAge and connections silent for
// as long, but for those whose Connect was read: an idle I/O queue is
// still its host's, until its FIN or RST (Close).
func (t *Tracker) Expire(now time.Time, maxAge time.Duration) {
	for f, c := range t.flows {
		if now.Sub(c.last) > maxAge && c.connect == nil {
			t.Close(f)
			continue
		}
		for cid, p := range c.out {
			if now.Sub(p.at) > maxAge {
				delete(c.out, cid)
				t.c.Expired++
			}
		}
	}
}
