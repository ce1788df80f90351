// Package advise recommends TCP buffer settings for iSCSI connections from
// what the kernel measures on them (TCP_INFO via sock_diag): RTT, RTT
// variation and bandwidth per initiator, their bandwidth-delay product
// (BDP), and seed 001's tuning scheme (its Table 4.3) for Open-iSCSI's
// send buffer (node.conn[0].tcp.window_size) and the kernel's buffer
// limits (net.core.{r,w}mem_max, net.ipv4.tcp_{r,w}mem).
//
// It only reads: it never writes a sysctl, never touches the initiators,
// and never changes a socket. Measuring is one sock_diag dump at the start
// and one at the end of an interval; Recommend is pure arithmetic.
//
// Imports (sanqos): none.
package advise

import (
	"fmt"
	"math"
	"net/netip"
	"sort"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
)

// Conn is one established TCP connection on the iSCSI port, as TCP_INFO
// reports it at the end of the interval, with its throughput over it.
type Conn struct {
	// Portal is the end on the iSCSI port (the target's portal); Peer is
	// the other end (the initiator), wherever sanqos runs.
	Portal, Peer netip.AddrPort
	SRTT         time.Duration
	RTTVar       time.Duration
	MinRTT       time.Duration
	// DeliveryRate is the kernel's latest delivery-rate sample (bytes/s);
	// AppLimited says the sender had nothing to send, so it understates
	// what the path could carry.
	DeliveryRate float64
	AppLimited   bool
	// Throughput is Δ(bytes_acked + bytes_received) / interval (bytes/s).
	Throughput float64
	SndCwnd    uint32 // segments
	SndMSS     uint32
	RcvSpace   uint32 // bytes the receiver autotuning currently aims for
}

// Link is one initiator's connections summarised: the figures the
// recommendation is made from.
type Link struct {
	Peer   netip.Addr
	Portal netip.AddrPort // the portal the initiator is connected to
	Conns  int
	SRTT   time.Duration // mean of the connections' smoothed RTTs
	RTTVar time.Duration // largest RTT variation
	// Bandwidth is the largest of the connections' delivery rates and
	// their summed throughput (bytes/s), or the --bandwidth override.
	Bandwidth   float64
	Measured    bool // Bandwidth came from the connections, not an override
	AppLimited  bool
	CwndBytes   uint64 // largest snd_cwnd × mss
	RcvSpace    uint32 // largest
	ThroughputB float64
}

// Summarise groups connections by initiator address and portal (an
// initiator's path to each portal is tuned on its own node record).
func Summarise(conns []Conn) []Link {
	type key struct {
		peer   netip.Addr
		portal netip.AddrPort
	}
	by := map[key]*Link{}
	for _, c := range conns {
		k := key{c.Peer.Addr(), c.Portal}
		l := by[k]
		if l == nil {
			l = &Link{Peer: c.Peer.Addr(), Portal: c.Portal, Measured: true}
			by[k] = l
		}
		l.Conns++
		l.SRTT += c.SRTT
		l.RTTVar = max(l.RTTVar, c.RTTVar)
		l.ThroughputB += c.Throughput
		l.Bandwidth = max(l.Bandwidth, c.DeliveryRate)
		l.AppLimited = l.AppLimited || c.AppLimited
		l.CwndBytes = max(l.CwndBytes, uint64(c.SndCwnd)*uint64(c.SndMSS))
		l.RcvSpace = max(l.RcvSpace, c.RcvSpace)
	}
	out := make([]Link, 0, len(by))
	for _, l := range by {
		l.SRTT /= time.Duration(l.Conns)
		l.Bandwidth = max(l.Bandwidth, l.ThroughputB)
		out = append(out, *l)
	}
	sort.Slice(out, func(i, k int) bool {
		if out[i].Peer != out[k].Peer {
			return out[i].Peer.Less(out[k].Peer)
		}
		return out[i].Portal.String() < out[k].Portal.String()
	})
	return out
}

// Dump returns the TCP_INFO of every socket of one address family
// (netlink.SocketDiagTCPInfo); tests substitute their own.
type Dump func(family uint8) ([]*netlink.InetDiagTCPInfoResp, error)

// tcpEstablished is TCP_ESTABLISHED in the kernel's tcp_states.h.
const tcpEstablished = 1

// snapshot is one dump's established connections on port, by cookie.
func snapshot(dump Dump, port uint16) (map[uint64]Conn, map[uint64]uint64, error) {
	conns, bytes := map[uint64]Conn{}, map[uint64]uint64{}
	for _, fam := range []uint8{syscall.AF_INET, syscall.AF_INET6} {
		resps, err := dump(fam)
		if err != nil {
			return nil, nil, fmt.Errorf("sock_diag: %w", err)
		}
		for _, r := range resps {
			m, ti := r.InetDiagMsg, r.TCPInfo
			if m == nil || ti == nil || m.State != tcpEstablished {
				continue
			}
			src, ok1 := netip.AddrFromSlice(m.ID.Source)
			dst, ok2 := netip.AddrFromSlice(m.ID.Destination)
			if !ok1 || !ok2 {
				continue
			}
			local, remote := netip.AddrPortFrom(src.Unmap(), m.ID.SourcePort), netip.AddrPortFrom(dst.Unmap(), m.ID.DestinationPort)
			// On the target the iSCSI port is ours; on an initiator it is
			// the remote end's.
			portal, peer := local, remote
			switch port {
			case m.ID.SourcePort:
			case m.ID.DestinationPort:
				portal, peer = remote, local
			default:
				continue
			}
			c := Conn{
				Portal: portal, Peer: peer,
				SRTT: time.Duration(ti.Rtt) * time.Microsecond, RTTVar: time.Duration(ti.Rttvar) * time.Microsecond,
				MinRTT: time.Duration(ti.Min_rtt) * time.Microsecond, DeliveryRate: float64(ti.Delivery_rate),
				AppLimited: ti.Delivery_rate_app_limited != 0, SndCwnd: ti.Snd_cwnd, SndMSS: ti.Snd_mss, RcvSpace: ti.Rcv_space,
			}
			k := uint64(m.ID.Cookie[0]) | uint64(m.ID.Cookie[1])<<32
			conns[k], bytes[k] = c, ti.Bytes_acked+ti.Bytes_received
		}
	}
	return conns, bytes, nil
}

// Measure dumps the connections on port, waits for wait (which sleeps for
// the interval and returns the time elapsed; injectable for tests), dumps
// again and returns the connections present at both ends with their
// throughput in between. Connections that came or went during the
// interval are left out: their byte counts span an unknown time.
func Measure(dump Dump, port uint16, wait func() time.Duration) ([]Conn, error) {
	_, before, err := snapshot(dump, port)
	if err != nil {
		return nil, err
	}
	secs := wait().Seconds()
	after, bytes, err := snapshot(dump, port)
	if err != nil {
		return nil, err
	}
	var out []Conn
	for k, c := range after {
		b0, ok := before[k]
		if !ok || bytes[k] < b0 {
			continue
		}
		if secs > 0 {
			c.Throughput = float64(bytes[k]-b0) / secs
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Peer.String() < out[k].Peer.String() })
	return out, nil
}

// SleepFor is Measure's wait in production: sleep d, return the time that
// really passed.
func SleepFor(d time.Duration) func() time.Duration {
	return func() time.Duration {
		t0 := time.Now()
		time.Sleep(d)
		return time.Since(t0)
	}
}

// Limits are the current kernel buffer limits (bytes); zero = unknown.
type Limits struct {
	RmemMax, WmemMax uint64
	TCPRmem, TCPWmem [3]uint64 // min default max
}

// Options shape the recommendation.
type Options struct {
	// MaxBuffer caps the send buffer (seed 001's "restricted memory
	// usage", e.g. a VM with many sessions); 0: free memory usage.
	MaxBuffer uint64
	// Target is the IQN for the iscsiadm command ("": a placeholder).
	Target string
}

// Seed 001's Table 4.3 splits on RTT ≤ 40 ms and on whether the RTT is
// stable. The thesis gives no number for "variable"; we call an RTT
// variable when its variation (rttvar, the kernel's mean deviation) is
// more than a quarter of the RTT itself, i.e. when a buffer sized for the
// mean RTT would be more than ~25 % off for a typical sample, and at least
// 1 ms: on a LAN (tens of µs, measured ±50 % on loopback) the relative
// variation is scheduling noise and the BDP too small for it to matter;
// the thesis' RTTs were 20–200 ms.
const (
	longRTT          = 40 * time.Millisecond
	variableFraction = 0.25
	variableMin      = time.Millisecond
	// roundTo is the granularity of a recommended buffer: seed 001 sized
	// its send buffers in 128 KB steps; 64 KiB keeps small LAN BDPs from
	// being doubled by the rounding.
	roundTo = 64 << 10
	// minBuffer is never recommended below: Open-iSCSI's own default
	// request (512 KB, seed 001 §4.2.2.1) is no worse on a short path.
	minBuffer = 512 << 10
)

// Sysctl is one recommended kernel setting.
type Sysctl struct {
	Key     string `json:"key"`
	Value   string `json:"value"`
	Current string `json:"current,omitempty"`
	Why     string `json:"why"`
}

// Recommendation is the advice for one initiator.
type Recommendation struct {
	Peer        string  `json:"initiator"`
	Portal      string  `json:"portal"`
	Conns       int     `json:"connections"`
	RTTMs       float64 `json:"rtt_ms"`
	RTTVarMs    float64 `json:"rttvar_ms"`
	Variable    bool    `json:"rtt_variable"`
	BandwidthBs float64 `json:"bandwidth_bytes_per_s"`
	Measured    bool    `json:"bandwidth_measured"`
	AppLimited  bool    `json:"app_limited"`
	BDP         uint64  `json:"bdp_bytes"`
	// WindowSize is node.conn[0].tcp.window_size: the send buffer the
	// initiator asks for (0: leave it to TCP autotuning).
	WindowSize uint64   `json:"window_size"`
	Row        string   `json:"table_4_3_row"`
	Iscsiadm   string   `json:"iscsiadm"`
	Sysctls    []Sysctl `json:"sysctls"`
	Notes      []string `json:"notes"`
}

// BDP is bandwidth (bytes/s) × RTT, in bytes, rounded up.
func BDP(bandwidth float64, rtt time.Duration) uint64 {
	if bandwidth <= 0 || rtt <= 0 {
		return 0
	}
	return uint64(math.Ceil(bandwidth * rtt.Seconds()))
}

func roundUp(n, to uint64) uint64 { return (n + to - 1) / to * to }

// Recommend applies seed 001's Table 4.3 to one link.
func Recommend(l Link, lim Limits, o Options) Recommendation {
	r := Recommendation{Peer: l.Peer.String(), Portal: l.Portal.String(), Conns: l.Conns, RTTMs: ms(l.SRTT), RTTVarMs: ms(l.RTTVar),
		BandwidthBs: l.Bandwidth, Measured: l.Measured, AppLimited: l.AppLimited}
	r.Variable = l.SRTT > 0 && l.RTTVar >= variableMin && float64(l.RTTVar) > variableFraction*float64(l.SRTT)
	r.BDP = BDP(l.Bandwidth, l.SRTT)
	// S_max_benefit: seed 001 found iSCSI's throughput grows with the send
	// buffer up to the buffer that fills the link at that RTT — the BDP —
	// and not beyond (512 KB at 40 ms, ~1152 KB at 100 ms, 100 Mbit/s).
	sMax := max(roundUp(r.BDP, roundTo), minBuffer)
	long := l.SRTT > longRTT
	restricted := o.MaxBuffer > 0 && o.MaxBuffer < sMax
	stable := "stable"
	if r.Variable {
		stable = "variable"
	}
	rtt := "≤ 40 ms"
	if long {
		rtt = "> 40 ms"
	}
	r.Row = fmt.Sprintf("RTT %s, %s", rtt, stable)
	switch {
	case long && r.Variable:
		// The one row where the thesis prefers autotuning: a static buffer
		// sized for the mean RTT is wrong most of the time; 0 tells
		// Open-iSCSI not to set SO_SNDBUF, which is what keeps the
		// kernel autotuning (§4.2.2.2).
		r.WindowSize = 0
		r.Notes = append(r.Notes, "Table 4.3: RTT > 40 ms and variable → TCP autotuning, with caution (window_size 0 leaves SO_SNDBUF unset); "+
			"seed 001 saw autotuning fall short at 200 ms, so keep tcp_wmem's max at least 2 × BDP.")
	case restricted:
		r.WindowSize = o.MaxBuffer
		r.Notes = append(r.Notes, fmt.Sprintf("Table 4.3, restricted memory: the send buffer is capped at %d B, below S_max_benefit (%d B), so use the cap; "+
			"expect at most %.1f MB/s (window / RTT, seed 001 eq. 4.2).", o.MaxBuffer, sMax, float64(o.MaxBuffer)/l.SRTT.Seconds()/1e6))
	default:
		r.WindowSize = sMax
		r.Notes = append(r.Notes, fmt.Sprintf("Table 4.3, %s: statically set the send buffer to S_max_benefit = BDP (%d B = %.1f MB/s × %.2f ms) rounded up to 64 KiB, at least Open-iSCSI's 512 KiB default.",
			r.Row, r.BDP, l.Bandwidth/1e6, ms(l.SRTT)))
		if r.Variable {
			r.Notes = append(r.Notes, "RTT is variable: the BDP is for the mean RTT (Table 4.3: according to the estimated mean RTT).")
		}
	}
	if long || restricted || r.Variable {
		r.Notes = append(r.Notes, "Table 4.3 also recommends an Open-iSCSI built with Nagle's algorithm on (TCP_NODELAY not set) and use_clustering: "+
			"this is a code change in the initiator, not a setting.")
	} else {
		r.Notes = append(r.Notes, "Table 4.3: the default Open-iSCSI implementation (TCP_NODELAY set) is best here.")
	}
	if !l.Measured {
		r.Notes = append(r.Notes, "bandwidth is the --bandwidth given, not measured.")
	} else if l.AppLimited {
		r.Notes = append(r.Notes, "the connections were application-limited during the interval: the measured bandwidth is what they used, not what the path carries; run under load or give --bandwidth.")
	}
	target := o.Target
	if target == "" {
		target = "<target-iqn>"
	}
	r.Iscsiadm = fmt.Sprintf("iscsiadm -m node -T %s -p %s -o update -n node.conn[0].tcp.window_size -v %d", target, l.Portal, r.WindowSize)
	// The kernel doubles a SO_SNDBUF request and caps it at 2 × wmem_max
	// (seed 001 §4.2.2.1): wmem_max below the window silently shrinks it,
	// as the thesis found Open-iSCSI's 512 KB becoming 256 KB.
	want := max(r.WindowSize, 2*r.BDP)
	r.Sysctls = []Sysctl{
		limitSysctl("net.core.wmem_max", max(r.WindowSize, lim.WmemMax), lim.WmemMax,
			"initiator: SO_SNDBUF requests (window_size) are capped at this; below the window the kernel silently shrinks it (seed 001 §4.2.2.1)"),
		limitSysctl("net.core.rmem_max", max(r.WindowSize, lim.RmemMax), lim.RmemMax,
			"target: caps an explicit SO_RCVBUF; the receiver must be able to hold a BDP for the window to be used"),
		tripleSysctl("net.ipv4.tcp_wmem", lim.TCPWmem, want,
			"autotuned send buffers grow up to max; half goes to overhead, so max ≥ 2 × BDP"),
		tripleSysctl("net.ipv4.tcp_rmem", lim.TCPRmem, want,
			"autotuned receive buffers (the target's window for writes) grow up to max; ≥ 2 × BDP"),
	}
	return r
}

func limitSysctl(key string, v, cur uint64, why string) Sysctl {
	s := Sysctl{Key: key, Value: fmt.Sprint(v), Why: why}
	if cur > 0 {
		s.Current = fmt.Sprint(cur)
		if cur >= v {
			s.Why = "already enough; " + why
		}
	}
	return s
}

// tripleSysctl keeps min and default and raises max to at least want:
// advice never lowers a limit someone raised for another reason.
func tripleSysctl(key string, cur [3]uint64, want uint64, why string) Sysctl {
	minV, def, maxV := cur[0], cur[1], cur[2]
	if minV == 0 {
		minV = 4096
	}
	if def == 0 {
		def = 131072
		if key == "net.ipv4.tcp_wmem" {
			def = 16384
		}
	}
	s := Sysctl{Key: key, Value: fmt.Sprintf("%d %d %d", minV, def, max(maxV, want)), Why: why}
	if cur != ([3]uint64{}) {
		s.Current = fmt.Sprintf("%d %d %d", cur[0], cur[1], cur[2])
		if maxV >= want {
			s.Why = "already enough; " + why
		}
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
