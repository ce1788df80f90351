// Package passive turns captured iSCSI or NVMe/TCP traffic into the
// agent's inputs in bridge mode (thesis 6.9), where the agent sees only
// packets: per consumer and resource, the commands' response times (SCSI
// matched by Initiator Task Tag, iscsipdu; NVMe by connection and CID,
// nvmetcp) and the bytes each way, published as
// cumulative counters in /proc/diskstats' shape (sample.Counters) of one
// pseudo-device per (resource, consumer). The agent's pipeline (sample.Diff
// → read-wait indicator → EWMA → controller → policy) then runs unchanged;
// resources are named by their target portals, and a consumer is any
// initiator seen talking to one.
//
// It only counts: it never captures (package capture feeds it), touches
// the kernel, or decides anything. It is safe for one feeding goroutine
// and any number of readers.
//
// Imports (sanqos): capture, iscsipdu, nvmetcp, sample.
package passive

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sanqos/sanqos/capture"
	"github.com/sanqos/sanqos/iscsipdu"
	"github.com/sanqos/sanqos/nvmetcp"
	"github.com/sanqos/sanqos/sample"
)

// Resource is one resource as bridge mode knows it: the portals (address
// and port) its target listens on, and the protocol spoken there.
type Resource struct {
	Name    string
	Portals []netip.AddrPort
	// Protocol is ISCSI or NVMeTCP; "" is NVMeTCP when every portal is on
	// nvmetcp.Port, else ISCSI.
	Protocol string
}

// Protocols a resource's portals speak (config's resources[].protocol).
const (
	ISCSI   = "iscsi"
	NVMeTCP = "nvme-tcp"
)

// maxAge is how long an unanswered command or a silent connection is
// remembered.
const maxAge = 30 * time.Second

// DevicePrefix starts every pseudo-device name, so they never clash with
// diskstats names.
const DevicePrefix = "iscsi:"

type devKey struct {
	resource  string
	initiator netip.Addr
}

// counter is a pseudo-device's cumulative counts, at full precision.
type counter struct {
	name               string
	reads, writes      uint64
	readNs, writeNs    int64
	readBytes, wrBytes uint64
	lastSeen           time.Time
}

// tracker is what a resource's protocol parser (iscsipdu's or nvmetcp's
// Tracker) does for the meter; both emit samples to complete.
type tracker interface {
	iscsipdu.Gapper
	Close(iscsipdu.Flow)
	Expire(now time.Time, maxAge time.Duration)
}

type resState struct {
	re *iscsipdu.Reassembler
	tr tracker
}

// Meter accumulates per-consumer counters from captured segments.
type Meter struct {
	mu      sync.Mutex
	portals map[netip.AddrPort]string
	res     map[string]*resState
	devs    map[devKey]*counter
	last    time.Time // newest segment seen
	expired time.Time
	now     func() time.Time
	// OnSample, when set before the first segment, sees every timed
	// command (under the meter's lock, so it must not call the meter):
	// the lab compares the wire's latency distribution with fio's,
	// which the counters' sums cannot.
	OnSample func(resource string, initiator netip.Addr, op iscsipdu.Op, lat time.Duration)
}

// NewMeter meters the given resources; portals must be distinct.
func NewMeter(rs []Resource) (*Meter, error) {
	m := &Meter{portals: map[netip.AddrPort]string{}, res: map[string]*resState{}, devs: map[devKey]*counter{},
		now: time.Now}
	for _, r := range rs {
		if len(r.Portals) == 0 {
			return nil, fmt.Errorf("resource %s: no portal", r.Name)
		}
		for _, p := range r.Portals {
			p = netip.AddrPortFrom(p.Addr().Unmap(), p.Port())
			if other, dup := m.portals[p]; dup {
				return nil, fmt.Errorf("portal %s is in resources %s and %s", p, other, r.Name)
			}
			m.portals[p] = r.Name
		}
		name := r.Name
		st := &resState{}
		switch r.protocol() {
		case ISCSI:
			st.tr = iscsipdu.NewTracker(iscsipdu.Options{}, func(s iscsipdu.Sample) {
				m.complete(name, s.Initiator, s.Op, s.Latency, s.At)
			})
		case NVMeTCP:
			st.tr = nvmetcp.NewTracker(nvmetcp.Options{}, func(s nvmetcp.Sample) {
				m.complete(name, s.Host, s.Op, s.Latency, s.At)
			})
		default:
			return nil, fmt.Errorf("resource %s: protocol %q: want %s or %s", r.Name, r.Protocol, ISCSI, NVMeTCP)
		}
		st.re = iscsipdu.NewReassembler(st.tr)
		m.res[name] = st
	}
	return m, nil
}

// protocol is r's Protocol, defaulted by port.
func (r Resource) protocol() string {
	if r.Protocol != "" {
		return r.Protocol
	}
	for _, p := range r.Portals {
		if p.Port() != nvmetcp.Port {
			return ISCSI
		}
	}
	return NVMeTCP
}

// Ports are the TCP ports of rs's portals, each once: what the capture
// must pass.
func Ports(rs []Resource) []uint16 {
	var ps []uint16
	for _, r := range rs {
		for _, p := range r.Portals {
			if !slices.Contains(ps, p.Port()) {
				ps = append(ps, p.Port())
			}
		}
	}
	return ps
}

// DeviceName is the pseudo-device of a consumer on a resource.
func DeviceName(resource string, initiator netip.Addr) string {
	return DevicePrefix + resource + ":" + initiator.String()
}

func (m *Meter) counter(resource string, ini netip.Addr, ts time.Time) *counter {
	k := devKey{resource, ini}
	c := m.devs[k]
	if c == nil {
		c = &counter{name: DeviceName(resource, ini)}
		m.devs[k] = c
	}
	c.lastSeen = ts
	return c
}

// complete is the trackers' callback (under m.mu, from Segment): one
// command of ini's, of either protocol.
func (m *Meter) complete(resource string, ini netip.Addr, op iscsipdu.Op, lat time.Duration, at time.Time) {
	c := m.counter(resource, ini.Unmap(), at)
	if m.OnSample != nil {
		m.OnSample(resource, ini.Unmap(), op, lat)
	}
	switch op {
	case iscsipdu.OpRead:
		c.reads++
		c.readNs += int64(lat)
	case iscsipdu.OpWrite:
		c.writes++
		c.writeNs += int64(lat)
	}
}

// Segment takes one captured segment (capture.Run's callback). Segments
// that touch no configured portal are ignored.
func (m *Meter) Segment(s capture.Segment) {
	src := netip.AddrPortFrom(s.Src.Addr().Unmap(), s.Src.Port())
	dst := netip.AddrPortFrom(s.Dst.Addr().Unmap(), s.Dst.Port())
	var f iscsipdu.Flow
	var d iscsipdu.Direction
	resource, ok := m.portals[dst]
	if ok {
		f, d = iscsipdu.Flow{Initiator: src, Target: dst}, iscsipdu.ToTarget
	} else if resource, ok = m.portals[src]; ok {
		f, d = iscsipdu.Flow{Initiator: dst, Target: src}, iscsipdu.ToInitiator
	} else {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.res[resource]
	if s.Time.After(m.last) {
		m.last = s.Time
	}
	if len(s.Payload) > 0 {
		c := m.counter(resource, f.Initiator.Addr(), s.Time)
		if d == iscsipdu.ToTarget {
			c.wrBytes += uint64(len(s.Payload))
		} else {
			c.readBytes += uint64(len(s.Payload))
		}
		st.re.Segment(f, d, s.Seq, s.Payload, s.Time)
	}
	if s.Flags&(capture.FIN|capture.RST) != 0 {
		st.re.Close(f)
		st.tr.Close(f)
	}
	if m.last.Sub(m.expired) > time.Second {
		m.expired = m.last
		for _, r := range m.res {
			r.tr.Expire(m.last, maxAge)
		}
	}
}

// Read returns the pseudo-devices' cumulative counters (the agent's
// Sampler). Times in ms are truncated from nanosecond sums, so a
// difference is exact to 1 ms over all commands of an interval, like
// diskstats'.
func (m *Meter) Read(devices ...string) (map[string]sample.Counters, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]sample.Counters, len(m.devs))
	for _, c := range m.devs {
		if len(devices) > 0 && !slices.Contains(devices, c.name) {
			continue
		}
		out[c.name] = sample.Counters{Device: c.name, Time: now,
			Reads: c.reads, ReadTicks: uint64(c.readNs / 1e6), ReadSectors: c.readBytes / 512,
			Writes: c.writes, WriteTicks: uint64(c.writeNs / 1e6), WriteSectors: c.wrBytes / 512}
	}
	return out, nil
}

// Consumers returns per resource the consumers seen within maxAge and
// their pseudo-device (what discovery reports in target mode).
func (m *Meter) Consumers() map[string]map[netip.Addr]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]map[netip.Addr]string{}
	for name := range m.res {
		out[name] = map[netip.Addr]string{}
	}
	for k, c := range m.devs {
		if m.last.Sub(c.lastSeen) > maxAge {
			delete(m.devs, k)
			continue
		}
		out[k.resource][k.initiator] = c.name
	}
	return out
}

// Counters are the parsers' anomaly counters summed over resources of
// both protocols, and the reassemblers' gaps.
func (m *Meter) Counters() (iscsipdu.Counters, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var t iscsipdu.Counters
	gaps := 0
	for _, r := range m.res {
		switch tr := r.tr.(type) {
		case *iscsipdu.Tracker:
			t = t.Add(tr.Counters())
		case *nvmetcp.Tracker:
			t = t.Add(tr.Counters().Counters)
		}
		gaps += r.re.Gaps
	}
	return t, gaps
}

// ParsePortal parses "addr:port" or a bare address (port def).
func ParsePortal(s string, def uint16) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: want address:port or address", s)
	}
	return netip.AddrPortFrom(a, def), nil
}
