package iscsipdu

import (
	"encoding/binary"
	"net/netip"
	"time"
)

// Flow is one iSCSI connection, named by its two ends.
type Flow struct {
	Initiator, Target netip.AddrPort
}

// Op is what a SCSI command did to the LUN.
type Op uint8

const (
	OpOther Op = iota
	OpRead
	OpWrite
)

func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpWrite:
		return "write"
	}
	return "other"
}

// Sample is one completed SCSI command.
type Sample struct {
	Initiator netip.Addr
	LUN       uint64
	Op        Op
	CDB0      byte // the CDB's opcode (e.g. 0x28 READ(10))
	ITT       uint32
	Status    byte // SCSI status (0 GOOD)
	Latency   time.Duration
	At        time.Time // when the response was seen
}

// Key groups samples: latency per initiator, LUN and read/write.
type Key struct {
	Initiator netip.Addr
	LUN       uint64
	Op        Op
}

// Stat is the latency of one key's commands since the last TakeStats.
type Stat struct {
	Count int
	Sum   time.Duration
	Max   time.Duration
}

// Mean is the mean latency (0 without commands).
func (s Stat) Mean() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.Sum / time.Duration(s.Count)
}

// Options configure a Tracker.
type Options struct {
	Digests Digests
	// MaxSegment caps an acceptable data segment length (0:
	// DefaultMaxSegment).
	MaxSegment int
	// MaxOutstanding caps remembered commands per connection (0: 4096,
	// above any sane queue depth); further commands are not timed.
	MaxOutstanding int
	// MaxFlows caps the connections tracked (0: 65536); further ones are
	// ignored until others are closed or expire.
	MaxFlows int
}

// Counters are a Tracker's cumulative anomalies, for diagnostics.
type Counters struct {
	Commands, Completed int
	Unmatched           int // responses whose ITT no command had
	Dropped             int // commands not remembered (table full)
	Expired             int // commands never answered
	Resyncs             int // bytes skipped resynchronising
	FlowsRefused        int
}

type pending struct {
	lun  uint64
	op   Op
	cdb0 byte
	at   time.Time
}

type conn struct {
	toTarget, toInitiator *stream
	out                   map[uint32]pending
	last                  time.Time
}

// Tracker times SCSI commands on many connections. It is not safe for
// concurrent use: a capture loop owns it.
type Tracker struct {
	o     Options
	flows map[Flow]*conn
	stats map[Key]Stat
	emit  func(Sample)
	c     Counters
}

// Feeder is what a bridge-mode sampler feeds: each TCP segment's payload
// of a flow, in stream order per direction, with its capture time.
type Feeder interface {
	Feed(f Flow, d Direction, payload []byte, ts time.Time)
}

var _ Feeder = (*Tracker)(nil)

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

// Feed parses one segment's payload of flow f in direction d, seen at ts.
func (t *Tracker) Feed(f Flow, d Direction, payload []byte, ts time.Time) {
	c := t.flows[f]
	if c == nil {
		if len(t.flows) >= t.o.MaxFlows {
			t.c.FlowsRefused++
			return
		}
		c = &conn{toTarget: newStream(ToTarget, t.o.Digests, t.o.MaxSegment), toInitiator: newStream(ToInitiator, t.o.Digests, t.o.MaxSegment),
			out: map[uint32]pending{}}
		t.flows[f] = c
	}
	c.last = ts
	s := c.toTarget
	if d == ToInitiator {
		s = c.toInitiator
	}
	before := s.Resyncs
	s.feed(payload, func(h []byte) { t.header(f, c, d, h, ts) })
	t.c.Resyncs += s.Resyncs - before
}

// header handles one PDU header.
func (t *Tracker) header(f Flow, c *conn, d Direction, h []byte, ts time.Time) {
	op := h[0] & 0x3f
	itt := binary.BigEndian.Uint32(h[16:20])
	switch {
	case d == ToTarget && op == OpSCSICommand:
		t.c.Commands++
		if itt == 0xffffffff { // reserved: no response will carry it
			return
		}
		if _, dup := c.out[itt]; !dup && len(c.out) >= t.o.MaxOutstanding {
			t.c.Dropped++
			return
		}
		c.out[itt] = pending{lun: decodeLUN(h[8:16]), op: classify(h[1], h[32]), cdb0: h[32], at: ts}
	case d == ToInitiator && op == OpSCSIResp:
		t.complete(f, c, itt, h[3], ts)
	case d == ToInitiator && op == OpDataIn && h[1]&0x01 != 0: // S: status in the final Data-In
		t.complete(f, c, itt, h[3], ts)
	}
}

func (t *Tracker) complete(f Flow, c *conn, itt uint32, status byte, ts time.Time) {
	p, ok := c.out[itt]
	if !ok {
		t.c.Unmatched++
		return
	}
	delete(c.out, itt)
	t.c.Completed++
	s := Sample{Initiator: f.Initiator.Addr(), LUN: p.lun, Op: p.op, CDB0: p.cdb0, ITT: itt, Status: status, Latency: ts.Sub(p.at), At: ts}
	k := Key{s.Initiator, s.LUN, s.Op}
	st := t.stats[k]
	st.Count++
	st.Sum += s.Latency
	st.Max = max(st.Max, s.Latency)
	t.stats[k] = st
	if t.emit != nil {
		t.emit(s)
	}
}

// TakeStats returns the latencies since the last call and starts anew
// (one call per control interval).
func (t *Tracker) TakeStats() map[Key]Stat {
	s := t.stats
	t.stats = map[Key]Stat{}
	return s
}

// Counters returns the cumulative anomaly counters.
func (t *Tracker) Counters() Counters { return t.c }

// Close forgets a connection (FIN or RST seen).
func (t *Tracker) Close(f Flow) {
	if c := t.flows[f]; c != nil {
		t.c.Expired += len(c.out)
		delete(t.flows, f)
	}
}

// Expire forgets commands older than maxAge (lost responses, or a capture
// that missed them) and connections silent for as long.
func (t *Tracker) Expire(now time.Time, maxAge time.Duration) {
	for f, c := range t.flows {
		if now.Sub(c.last) > maxAge {
			t.Close(f)
			continue
		}
		for itt, p := range c.out {
			if now.Sub(p.at) > maxAge {
				delete(c.out, itt)
				t.c.Expired++
			}
		}
	}
}

// decodeLUN turns the 8-byte LUN field into the LUN number for the SAM
// peripheral (00b) and flat (01b) addressing methods, which is what
// targets use for LUNs below 16384; other methods are returned raw.
func decodeLUN(b []byte) uint64 {
	switch b[0] >> 6 {
	case 0:
		if b[0] == 0 {
			return uint64(b[1])
		}
	case 1:
		return uint64(b[0]&0x3f)<<8 | uint64(b[1])
	}
	return binary.BigEndian.Uint64(b)
}

// classify names a command read or write by its CDB opcode (the READ and
// WRITE families), falling back on the command's R/W flags for others
// that move data (e.g. WRITE SAME, vendor commands).
func classify(flags, cdb0 byte) Op {
	switch cdb0 {
	case 0x08, 0x28, 0xa8, 0x88: // READ(6/10/12/16)
		return OpRead
	case 0x0a, 0x2a, 0xaa, 0x8a, 0x2e, 0x8e: // WRITE(6/10/12/16), WRITE AND VERIFY(10/16)
		return OpWrite
	}
	switch {
	case flags&0x20 != 0:
		return OpWrite
	case flags&0x40 != 0:
		return OpRead
	}
	return OpOther
}
