package passive

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/capture"
	"github.com/sanqos/sanqos/iscsipdu"
)

// bhs builds a 48-byte Basic Header Segment followed by dsl data bytes.
func bhs(op, flags byte, lun byte, itt uint32, cdb0 byte, dsl int) []byte {
	h := make([]byte, 48+(dsl+3)&^3)
	h[0], h[1] = op, flags
	h[5], h[6], h[7] = byte(dsl>>16), byte(dsl>>8), byte(dsl)
	h[9] = lun
	binary.BigEndian.PutUint32(h[16:20], itt)
	h[32] = cdb0
	return h
}

var (
	portal = netip.MustParseAddrPort("10.99.0.1:3260")
	t0     = time.Unix(5000, 0)
)

// conn replays one connection's segments in order with sequence numbers.
type conn struct {
	ini        netip.AddrPort
	seqT, seqI uint32
	m          *Meter
}

func (c *conn) toTarget(at time.Duration, p []byte) {
	c.m.Segment(capture.Segment{Src: c.ini, Dst: portal, Seq: c.seqT, Payload: p, Time: t0.Add(at)})
	c.seqT += uint32(len(p))
}

func (c *conn) toInitiator(at time.Duration, p []byte) {
	c.m.Segment(capture.Segment{Src: portal, Dst: c.ini, Seq: c.seqI, Payload: p, Time: t0.Add(at)})
	c.seqI += uint32(len(p))
}

// Reads and writes of each consumer become diskstats-shaped counters of
// its pseudo-device: completions, ms spent, and bytes each way as sectors;
// OnSample sees each command's latency whole.
func TestMeterCounters(t *testing.T) {
	m, err := NewMeter([]Resource{{Name: "r0", Portals: []netip.AddrPort{portal}}})
	if err != nil {
		t.Fatal(err)
	}
	var samples []string
	m.OnSample = func(res string, ini netip.Addr, op iscsipdu.Op, lat time.Duration) {
		samples = append(samples, fmt.Sprintf("%s %s %d %v", res, ini, op, lat))
	}
	m.now = func() time.Time { return t0.Add(time.Second) }
	reader := &conn{ini: netip.MustParseAddrPort("10.99.0.2:40000"), seqT: 100, seqI: 9000, m: m}
	writer := &conn{ini: netip.MustParseAddrPort("[::ffff:10.99.0.3]:40001"), seqT: 5, seqI: 7, m: m}
	// Two 8 KiB READ(10)s: 12.5 ms and 7.7 ms (final Data-In carries status).
	reader.toTarget(0, bhs(0x01, 0xc0, 0, 1, 0x28, 0))
	reader.toTarget(time.Millisecond, bhs(0x01, 0xc0, 0, 2, 0x28, 0))
	reader.toInitiator(12500*time.Microsecond, bhs(0x25, 0x81, 0, 1, 0, 8192))
	reader.toInitiator(8700*time.Microsecond, bhs(0x25, 0x81, 0, 2, 0, 8192))
	// A 64 KiB WRITE(10): 32 KiB immediate, 32 KiB Data-Out, response 3 ms later.
	writer.toTarget(0, bhs(0x41, 0xa0, 1, 7, 0x2a, 32768))
	writer.toTarget(time.Millisecond, bhs(0x05, 0x80, 1, 7, 0, 32768))
	writer.toInitiator(4*time.Millisecond, bhs(0x21, 0x80, 0, 7, 0, 0))
	// Traffic of another portal is not ours.
	m.Segment(capture.Segment{Src: netip.MustParseAddrPort("10.99.0.4:1"), Dst: netip.MustParseAddrPort("10.99.0.9:3260"), Payload: bhs(0x01, 0xc0, 0, 1, 0x28, 0), Time: t0})

	got, err := m.Read()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("devices %v, want the reader's and the writer's", got)
	}
	r := got[DeviceName("r0", netip.MustParseAddr("10.99.0.2"))]
	if r.Reads != 2 || r.ReadTicks != 20 || r.Writes != 0 || r.ReadSectors != 2*(48+8192)/512 || r.WriteSectors != 0 || !r.Time.Equal(t0.Add(time.Second)) {
		t.Errorf("reader: %+v (want 2 reads, 20 ms: 12.5 + 7.7 truncated)", r)
	}
	w := got[DeviceName("r0", netip.MustParseAddr("10.99.0.3"))] // IPv4-mapped: the plain address
	if w.Writes != 1 || w.WriteTicks != 4 || w.Reads != 0 || w.WriteSectors != (2*48+65536)/512 {
		t.Errorf("writer: %+v", w)
	}
	if want := "[r0 10.99.0.2 1 12.5ms r0 10.99.0.2 1 7.7ms r0 10.99.0.3 2 4ms]"; fmt.Sprint(samples) != want {
		t.Errorf("samples %v, want %s", samples, want)
	}
	cons := m.Consumers()["r0"]
	if len(cons) != 2 || cons[netip.MustParseAddr("10.99.0.2")] == "" {
		t.Errorf("consumers %v", cons)
	}
	if only, _ := m.Read(r.Device); len(only) != 1 {
		t.Errorf("Read(%s) = %v", r.Device, only)
	}
}

// A connection closed mid-command forgets it (Expired), and a retransmitted
// command is timed once.
func TestMeterCloseAndRetransmit(t *testing.T) {
	m, _ := NewMeter([]Resource{{Name: "r0", Portals: []netip.AddrPort{portal}}})
	c := &conn{ini: netip.MustParseAddrPort("10.99.0.2:40000"), m: m}
	cmd := bhs(0x01, 0xc0, 0, 1, 0x28, 0)
	c.toTarget(0, cmd)
	m.Segment(capture.Segment{Src: c.ini, Dst: portal, Seq: 0, Payload: cmd, Time: t0.Add(2 * time.Millisecond)}) // retransmission
	c.toInitiator(5*time.Millisecond, bhs(0x21, 0x80, 0, 1, 0, 0))
	c.toTarget(6*time.Millisecond, bhs(0x01, 0xc0, 0, 2, 0x28, 0))
	m.Segment(capture.Segment{Src: portal, Dst: c.ini, Seq: c.seqI, Flags: capture.FIN, Time: t0.Add(7 * time.Millisecond)})
	got, _ := m.Read()
	d := got[DeviceName("r0", netip.MustParseAddr("10.99.0.2"))]
	if d.Reads != 1 || d.ReadTicks != 5 {
		t.Errorf("%+v: want one read of 5 ms (from the first transmission)", d)
	}
	if pc, _ := m.Counters(); pc.Commands != 2 || pc.Completed != 1 || pc.Expired != 1 {
		t.Errorf("counters %+v", pc)
	}
}

func TestNewMeterRejectsSharedPortal(t *testing.T) {
	_, err := NewMeter([]Resource{{Name: "a", Portals: []netip.AddrPort{portal}}, {Name: "b", Portals: []netip.AddrPort{portal}}})
	if err == nil {
		t.Fatal("a portal in two resources was accepted")
	}
	if _, err := NewMeter([]Resource{{Name: "a"}}); err == nil {
		t.Fatal("a resource without portals was accepted")
	}
}

func TestParsePortal(t *testing.T) {
	for in, want := range map[string]string{"10.0.0.1": "10.0.0.1:3260", "10.0.0.1:3261": "10.0.0.1:3261", "fd00::1": "[fd00::1]:3260", "[fd00::1]:860": "[fd00::1]:860"} {
		got, err := ParsePortal(in, 3260)
		if err != nil || got.String() != want {
			t.Errorf("%s: %v %v, want %s", in, got, err, want)
		}
	}
	if _, err := ParsePortal("target:3260", 3260); err == nil {
		t.Error("a host name was accepted")
	}
}
