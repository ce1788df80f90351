package nvmetcp

import (
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/pdutrack"
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
	pdutrack.Counters     // Unmatched: completions whose CID no command had
	Connects          int // Fabrics Connect commands read
	R2Ts              int // ready-to-transfer PDUs (the writers' lever)
	// DataSuccess counts commands completed by a C2HData with SUCCESS,
	// no response capsule.
	DataSuccess int
}

type pending struct {
	nsid   uint32
	op     Op
	opcode byte
}

// conn is one connection's streams, by Direction, and what they agreed.
type conn struct {
	s       [2]*stream
	dig     Digests
	connect *Connect
}

type tconn = pdutrack.Conn[uint16, *conn, pending]

// Tracker times commands on many connections and remembers each
// connection's Connect. Not safe for concurrent use: a capture loop owns
// it.
type Tracker struct {
	tab       *pdutrack.Table[Flow, uint16, *conn, pending]
	stats     pdutrack.Stats[Key]
	emit      func(Sample)
	onConnect func(Flow, Connect)
	c         Counters // but its pdutrack.Counters: tab's
}

var _ iscsipdu.Gapper = (*Tracker)(nil)

// NewTracker returns a tracker; emit (optional) sees every sample.
func NewTracker(o Options, emit func(Sample)) *Tracker {
	newConn := func() *conn {
		return &conn{s: [2]*stream{ToTarget: newStream(ToTarget, o.MaxPDU, nil), ToInitiator: newStream(ToInitiator, o.MaxPDU, nil)}}
	}
	return &Tracker{tab: pdutrack.NewTable[Flow, uint16, *conn, pending](o.MaxFlows, o.MaxOutstanding, newConn), stats: pdutrack.Stats[Key]{}, emit: emit}
}

// OnConnect sets a function called with every Connect command read.
func (t *Tracker) OnConnect(f func(Flow, Connect)) { t.onConnect = f }

// Feed parses one segment's payload of flow f in direction d, seen at ts.
func (t *Tracker) Feed(f Flow, d Direction, payload []byte, ts time.Time) {
	if c := t.tab.Conn(f, ts); c != nil {
		t.tab.Resyncs += c.State.s[d].feed(payload, func(h Header, pdu []byte) { t.header(f, c, h, pdu, ts) })
	}
}

// Gap tells the tracker bytes of f's direction d were lost: the stream
// looks for the next header. Outstanding commands stay.
func (t *Tracker) Gap(f Flow, d Direction) {
	if c := t.tab.Flows[f]; c != nil {
		c.State.s[d].Gap()
	}
}

// header handles one PDU header (pdu: the whole PDU of a Connect).
func (t *Tracker) header(f Flow, c *tconn, h Header, pdu []byte, ts time.Time) {
	switch {
	case h.Type == TypeICResp:
		// The controller's answer is what both sides use from now on.
		c.State.dig = h.Digests
		c.State.s[ToTarget].dig, c.State.s[ToInitiator].dig = &c.State.dig, &c.State.dig
	case h.Type == TypeR2T:
		t.c.R2Ts++
	case h.Type == TypeCapsuleCmd:
		t.command(f, c.State, h, pdu)
		t.tab.Start(c, h.CID, pending{nsid: h.NSID, op: c.State.classify(h.Opcode), opcode: h.Opcode}, ts)
	case h.Completes():
		if t.complete(f, c, h.CID, h.Status, ts) && h.Type == TypeC2HData {
			t.c.DataSuccess++
		}
	}
}

func (t *Tracker) command(f Flow, c *conn, h Header, pdu []byte) {
	t.tab.Commands++
	if h.IsConnect() {
		if cn, ok := ParseConnect(h, inCapsule(h, pdu)); ok {
			t.c.Connects++
			c.connect = &cn
			if t.onConnect != nil {
				t.onConnect(f, cn)
			}
		}
	}
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
func (t *Tracker) complete(f Flow, c *tconn, cid, status uint16, ts time.Time) bool {
	p, lat, ok := t.tab.Finish(c, cid, ts)
	if !ok {
		return false
	}
	qid := -1
	if c.State.connect != nil {
		qid = int(c.State.connect.QID)
	}
	s := Sample{Host: f.Initiator.Addr(), QID: qid, NSID: p.nsid, Op: p.op, Opcode: p.opcode, CID: cid, Status: status, Latency: lat, At: ts}
	t.stats.Add(Key{s.Host, s.NSID, s.Op}, lat)
	if t.emit != nil {
		t.emit(s)
	}
	return true
}

// TakeStats returns the latencies since the last call and starts anew.
func (t *Tracker) TakeStats() map[Key]Stat { return t.stats.Take() }

// Counters returns the cumulative counters.
func (t *Tracker) Counters() Counters {
	c := t.c
	c.Counters = t.tab.Counters
	return c
}

// Connections returns the Connect of every open connection that sent
// one: which host uses which subsystem on which queue.
func (t *Tracker) Connections() map[Flow]Connect {
	out := map[Flow]Connect{}
	for f, c := range t.tab.Flows {
		if c.State.connect != nil {
			out[f] = *c.State.connect
		}
	}
	return out
}

// Close forgets a connection (FIN or RST seen).
func (t *Tracker) Close(f Flow) { t.tab.Close(f) }

// Expire forgets commands older than maxAge and connections silent for
// as long, but for those whose Connect was read: an idle I/O queue is
// still its host's, until its FIN or RST (Close).
func (t *Tracker) Expire(now time.Time, maxAge time.Duration) {
	t.tab.Expire(now, maxAge, func(c *conn) bool { return c.connect != nil })
}
