package iscsipdu

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/pdutrack"
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
type Stat = pdutrack.Stat

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
type Counters = pdutrack.Counters

type pending struct {
	lun  uint64
	op   Op
	cdb0 byte
}

// conn is one connection's streams, by Direction.
type conn = [2]*stream

// Tracker times SCSI commands on many connections. It is not safe for
// concurrent use: a capture loop owns it.
type Tracker struct {
	tab   *pdutrack.Table[Flow, uint32, conn, pending]
	stats pdutrack.Stats[Key]
	emit  func(Sample)
}

// Feeder is what a bridge-mode sampler feeds: each TCP segment's payload
// of a flow, in stream order per direction, with its capture time.
type Feeder interface {
	Feed(f Flow, d Direction, payload []byte, ts time.Time)
}

var _ Feeder = (*Tracker)(nil)

// NewTracker returns a tracker; emit (optional) sees every sample.
func NewTracker(o Options, emit func(Sample)) *Tracker {
	newConn := func() conn {
		return conn{ToTarget: newStream(ToTarget, o.Digests, o.MaxSegment), ToInitiator: newStream(ToInitiator, o.Digests, o.MaxSegment)}
	}
	return &Tracker{tab: pdutrack.NewTable[Flow, uint32, conn, pending](o.MaxFlows, o.MaxOutstanding, newConn), stats: pdutrack.Stats[Key]{}, emit: emit}
}

// Feed parses one segment's payload of flow f in direction d, seen at ts.
func (t *Tracker) Feed(f Flow, d Direction, payload []byte, ts time.Time) {
	if c := t.tab.Conn(f, ts); c != nil {
		t.tab.Resyncs += c.State[d].feed(payload, func(h []byte) { t.header(f, c, d, h, ts) })
	}
}

// header handles one PDU header.
func (t *Tracker) header(f Flow, c *pdutrack.Conn[uint32, conn, pending], d Direction, h []byte, ts time.Time) {
	op := h[0] & 0x3f
	itt := binary.BigEndian.Uint32(h[16:20])
	switch {
	case d == ToTarget && op == OpSCSICommand:
		t.tab.Commands++
		if itt != 0xffffffff { // reserved: no response will carry it
			t.tab.Start(c, itt, pending{lun: decodeLUN(h[8:16]), op: classify(h[1], h[32]), cdb0: h[32]}, ts)
		}
	case d == ToInitiator && op == OpSCSIResp,
		d == ToInitiator && op == OpDataIn && h[1]&0x01 != 0: // S: status in the final Data-In
		if p, lat, ok := t.tab.Finish(c, itt, ts); ok {
			s := Sample{Initiator: f.Initiator.Addr(), LUN: p.lun, Op: p.op, CDB0: p.cdb0, ITT: itt, Status: h[3], Latency: lat, At: ts}
			t.stats.Add(Key{s.Initiator, s.LUN, s.Op}, lat)
			if t.emit != nil {
				t.emit(s)
			}
		}
	}
}

// TakeStats returns the latencies since the last call and starts anew
// (one call per control interval).
func (t *Tracker) TakeStats() map[Key]Stat { return t.stats.Take() }

// Counters returns the cumulative anomaly counters.
func (t *Tracker) Counters() Counters { return t.tab.Counters }

// Close forgets a connection (FIN or RST seen).
func (t *Tracker) Close(f Flow) { t.tab.Close(f) }

// Expire forgets commands older than maxAge (lost responses, or a capture
// that missed them) and connections silent for as long.
func (t *Tracker) Expire(now time.Time, maxAge time.Duration) { t.tab.Expire(now, maxAge, nil) }

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
