package sample

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
)

// Rate is a consumer's traffic on the storage port over one interval, from
// the target's point of view: bytes received are the consumer's writes,
// bytes acknowledged by it are its reads.
type Rate struct {
	ReadBps  float64
	WriteBps float64
	Conns    int
	SRTT     time.Duration // largest smoothed RTT among its connections
	// SendSRTT is the smallest srtt among its connections that sent it
	// more than one data segment in the interval (0: none did): data
	// held for it by a delay runs against the target's tail-loss probe
	// timer, 2·srtt + 2 ms while more than one segment is in flight
	// (a lone segment's has 200 ms more), so this is the shortest timer
	// that data held for it runs against. Connections that sent less, an
	// idle session's NOP-In, keep the srtt of whenever they last moved
	// data, which says nothing about the delay acting now.
	SendSRTT time.Duration
	// The network saturation signals (seed 003: congestion from measured
	// delay), from the same TCP_INFO dump, so the agent reads the kernel
	// once per tick for rates and for delay.
	//
	// QueueDelay is the largest srtt − min_rtt among its connections: the
	// part of the round trip spent waiting in queues. min_rtt is the
	// kernel's windowed minimum (net.ipv4.tcp_min_rtt_wlen, 300 s by
	// default), so on a long-lived iSCSI connection it is the path's
	// empty-queue RTT and the difference is queueing (plus any delay our
	// own delay line adds: see agent.NetIndicator).
	QueueDelay time.Duration
	MinRTT     time.Duration // smallest min_rtt among its connections
	RTTVar     time.Duration // largest rttvar among its connections
	// DeliveryBps is the sum of its connections' delivery rate estimates
	// (tcpi_delivery_rate, bytes/s of the target's sending).
	DeliveryBps float64
	// InFlight is the bytes the target has sent it and not had acked
	// (unacked segments × MSS), summed over its connections.
	InFlight float64
	// CommandsPerSec estimates the iSCSI commands it sends per second
	// from its data segments (see commands): exact for reads, so with
	// its devices' read wait, the number of its reads in the resource
	// where it shares the devices with others, which diskstats cannot
	// split.
	CommandsPerSec float64
	// ReadBytes and WriteBytes are the bytes behind ReadBps and WriteBps
	// (acked by it, received from it) since the previous sample: what
	// the agent's per-consumer byte counters add up, exactly.
	ReadBytes, WriteBytes uint64
	// Seconds is the interval the rates are over (0: not known).
	Seconds float64
}

// Over restates the rates over an interval of secs, the one the caller's
// other figures of the same tick cover (the agent's: its devices'): the
// same bytes and commands, divided by secs instead of Seconds. The agent
// reads diskstats, then TCP_INFO; a stall between the two reads (the
// TCG guest, a loaded host) leaves the next tick's wire interval a few
// ms long beside a device interval of a quarter to a whole second, and
// one 8 KiB read over 4 ms is 2 MB/s, which the agent's smoothing
// weighed by the devices' interval: the LIO guest's reader, 0.25 MB/s
// on its LUN and on the wire alike, smoothed to 1.02 and 1.85 MB/s and
// was slowed as a bulk reader (docs/lab.md, "What each client moves on
// the wire"); on a shared LUN the same commands/s made its queue.
func (r *Rate) Over(secs float64) {
	if secs <= 0 || r.Seconds <= 0 {
		return
	}
	r.CommandsPerSec *= r.Seconds / secs
	r.ReadBps, r.WriteBps, r.Seconds = float64(r.ReadBytes)/secs, float64(r.WriteBytes)/secs, secs
}

type connKey struct {
	cookie uint64
	peer   netip.AddrPort
}

type connCounters struct {
	recv, acked uint64
	segsIn      uint32 // tcpi_data_segs_in (wraps)
	segsOut     uint32 // tcpi_data_segs_out (wraps)
	srtt        time.Duration
	mss         uint32 // tcpi_snd_mss: the path's, as the initiator's full segments are
}

// TCPRates samples per-connection TCP_INFO (sock_diag) for connections on a
// local port and turns byte counters into per-peer rates. Counters are per
// connection, so a consumer that reconnects starts a new baseline instead
// of producing a negative or huge rate.
type TCPRates struct {
	// Ports are the target's: connections on any of them are sampled.
	Ports []uint16
	prev  map[connKey]connCounters
	at    time.Time
	// dump hands every established TCP socket of a family to each as its
	// raw inet_diag reply (exactDiag.dump).
	dump func(family uint8, each func(reply []byte)) error
	now  func() time.Time
	// exact looks known connections up (nil: dump every sample); known
	// are the established ones of the last dump, sinceDump counts the
	// samples since it.
	exact     func([]diagID) ([]connSample, error)
	known     []diagID
	sinceDump int
	// changed gets a token whenever the set of connections differs from
	// the previous sample's (ConnChanges).
	changed chan struct{}
}

// ConnChanges signals (coalesced) that a sample saw connections appear or
// go: a login or logout, the moment to rediscover who uses what.
func (t *TCPRates) ConnChanges() <-chan struct{} { return t.changed }

// NewTCPRates samples connections whose local port is one of ports, in
// the network namespace of the calling process.
func NewTCPRates(ports ...uint16) *TCPRates {
	e := &exactDiag{}
	return &TCPRates{Ports: ports, dump: e.dump, exact: e.lookup, now: time.Now, changed: make(chan struct{}, 1)}
}

// Sample returns each peer's rates since the previous call (nil on the
// first call, which only sets the baseline).
func (t *TCPRates) Sample() (map[netip.Addr]Rate, error) {
	var conns []connSample
	var err error
	switch {
	case t.exact == nil || t.prev == nil || t.sinceDump >= fullEvery-1:
	case len(t.known) == 0:
		// No connections at the last dump: none to look up, and a new one
		// waits for the next dump like on a busy target.
		conns = []connSample{}
		t.sinceDump++
	default:
		if conns, err = t.exact(t.known); err == nil {
			t.sinceDump++
		}
	}
	if conns == nil {
		if conns, err = t.dumpAll(); err != nil {
			return nil, err
		}
	}
	cur := make(map[connKey]connCounters, len(conns))
	net := map[netip.Addr]Rate{} // per-peer delay signals
	for i := range conns {
		c := &conns[i]
		cur[c.key] = connCounters{recv: c.ti.Bytes_received, acked: c.ti.Bytes_acked, segsIn: c.ti.Data_segs_in,
			segsOut: c.ti.Data_segs_out, srtt: time.Duration(c.ti.Rtt) * time.Microsecond, mss: c.ti.Snd_mss}
		n := net[c.key.peer.Addr()]
		addDelay(&n, &c.ti)
		net[c.key.peer.Addr()] = n
	}
	now := t.now()
	prev, at := t.prev, t.at
	t.prev, t.at = cur, now
	if t.changed != nil && !sameKeys(prev, cur) {
		select {
		case t.changed <- struct{}{}:
		default: // a change is already pending
		}
	}
	if prev == nil {
		return nil, nil
	}
	secs := now.Sub(at).Seconds()
	out := map[netip.Addr]Rate{}
	for k, c := range cur {
		r := out[k.peer.Addr()]
		r.Conns++
		r.Seconds = secs
		n := net[k.peer.Addr()]
		r.SRTT, r.QueueDelay, r.MinRTT, r.RTTVar, r.DeliveryBps, r.InFlight = n.SRTT, n.QueueDelay, n.MinRTT, n.RTTVar, n.DeliveryBps, n.InFlight
		if p, ok := prev[k]; ok && secs > 0 && c.recv >= p.recv && c.acked >= p.acked {
			r.WriteBps += float64(c.recv-p.recv) / secs
			r.ReadBps += float64(c.acked-p.acked) / secs
			r.WriteBytes += c.recv - p.recv
			r.ReadBytes += c.acked - p.acked
			r.CommandsPerSec += commands(c.segsIn-p.segsIn, c.recv-p.recv, c.mss) / secs
			if c.segsOut-p.segsOut > 1 && c.srtt > 0 && (r.SendSRTT == 0 || c.srtt < r.SendSRTT) {
				r.SendSRTT = c.srtt
			}
		}
		out[k.peer.Addr()] = r
	}
	return out, nil
}

// commands estimates how many iSCSI commands arrived in segs data
// segments carrying bytes: a command PDU is a short segment of its own
// (48 bytes, or the tail of a write's immediate data) while write data
// fills whole segments of mss, so the segments that whole-segment data
// does not explain are commands. Exact for reads; a write counts only
// the fraction its last segment leaves empty (0.3 for 8 KiB at an MSS of
// 1448), so writers are under-counted — the safe side for a rule that
// slows consumers by their queue. The MSS is the target's sending one:
// tcpi_rcv_mss stays at 536 on a connection that has only received
// short segments (a reader's), which would under-count reads by 9 %.
func commands(segs uint32, bytes uint64, mss uint32) float64 {
	if mss == 0 {
		return 0
	}
	return max(0, float64(segs)-float64(bytes)/float64(mss))
}

// dumpAll dumps every TCP socket of both families, keeps those on Ports
// and remembers them for exact lookups.
func (t *TCPRates) dumpAll() ([]connSample, error) {
	var out []connSample
	t.known = t.known[:0]
	t.sinceDump = 0
	keep := func(b []byte) {
		// Established only, as the exact lookups see them: a listening
		// or closing socket moves no consumer's data, and counting it in
		// one path but not the other would look like a connection change.
		if len(b) < inetDiagMsgLen || b[1] != tcpEstablished || !slices.Contains(t.Ports, binary.BigEndian.Uint16(b[4:])) {
			return
		}
		s, err := parseDiagReply(b)
		if err != nil {
			return // no TCP_INFO: no rates from it
		}
		out = append(out, s)
		t.known = append(t.known, idOfReply(b))
	}
	for _, fam := range []uint8{syscall.AF_INET, syscall.AF_INET6} {
		if err := t.dump(fam, keep); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// tcpEstablished is TCP_ESTABLISHED: listening sockets need no rates.
const tcpEstablished = 1

func sameKeys(a, b map[connKey]connCounters) bool {
	if len(a) != len(b) || a == nil {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

// addDelay folds one connection's TCP_INFO into its peer's delay signals.
// srtt − min_rtt is taken per connection (each has its own path minimum);
// a connection without an RTT sample yet (min_rtt 0 or ~0u) adds nothing.
func addDelay(n *Rate, ti *netlink.TCPInfo) {
	us := func(v uint32) time.Duration { return time.Duration(v) * time.Microsecond }
	n.SRTT = max(n.SRTT, us(ti.Rtt))
	n.RTTVar = max(n.RTTVar, us(ti.Rttvar))
	n.DeliveryBps += float64(ti.Delivery_rate)
	n.InFlight += float64(ti.Unacked) * float64(ti.Snd_mss)
	if ti.Min_rtt == 0 || ti.Min_rtt == ^uint32(0) {
		return
	}
	if n.MinRTT == 0 || us(ti.Min_rtt) < n.MinRTT {
		n.MinRTT = us(ti.Min_rtt)
	}
	if ti.Rtt > ti.Min_rtt {
		n.QueueDelay = max(n.QueueDelay, us(ti.Rtt-ti.Min_rtt))
	}
}

// Conn is one established TCP connection: the local end and the peer.
type Conn struct{ Local, Peer netip.AddrPort }

// Established lists the established TCP connections whose local port is
// port, in the calling process's network namespace (one sock_diag dump
// per family): who is connected where the target does not say, as the
// kernel NVMe target's configfs does not.
func Established(port uint16) ([]Conn, error) {
	e := &exactDiag{}
	defer e.close()
	var out []Conn
	for _, fam := range []uint8{syscall.AF_INET, syscall.AF_INET6} {
		err := e.dump(fam, func(b []byte) {
			if len(b) < inetDiagMsgLen || b[1] != tcpEstablished || binary.BigEndian.Uint16(b[4:]) != port {
				return
			}
			id := b[4:52]
			addr := func(a []byte) netip.Addr {
				if fam == syscall.AF_INET {
					return netip.AddrFrom4([4]byte(a[:4]))
				}
				return netip.AddrFrom16([16]byte(a[:16])).Unmap()
			}
			out = append(out, Conn{Local: netip.AddrPortFrom(addr(id[4:]), port), Peer: netip.AddrPortFrom(addr(id[20:]), binary.BigEndian.Uint16(id[2:]))})
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
