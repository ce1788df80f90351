// Package discover finds out, from the iSCSI target's own view, who uses
// what: the targets and LUNs exported, the backing store of each LUN, the
// initiators logged in and the IP addresses their connections come from —
// and from sysfs, which block device's /proc/diskstats line measures each
// LUN and which shared devices (the resource) lie underneath.
//
// Sources: tgt (the text of `tgtadm --op show --mode target` and of
// `--mode portal`), LIO (its configfs tree) and IET
// (/proc/net/iet/{session,volume}). All three are parsed into the same
// []Target, and BuildSnapshot turns that into the Resource/Consumer map
// the rest of the pipeline steers by. The kernel
// NVMe target's configfs (ReadNVMet) gives subsystems as Targets too,
// with their ports; who is connected is not in it. ReadAll merges what
// each source present on the host exports (AutoProbes: discovery source
// auto).
//
// discover only reads. It never changes target configuration: Tgt runs
// tgtadm with a show operation only (directly, never through a shell, with
// a timeout), the parsers take text the caller passes, and nothing here
// writes to configfs, /proc or /sys or touches sessions. The parsers treat their input as untrusted: malformed
// text yields an error, never a panic (see the fuzz tests).
//
// Imports (sanqos): none.
package discover

import (
	"errors"
	"net/netip"
	"slices"
	"sort"
	"strings"
)

// Target is one exported iSCSI target (for LIO: one target portal group).
type Target struct {
	TID      int    // tgt/IET target id; LIO TPG tag
	IQN      string // target name
	State    string // tgt: "ready", "offline"; empty where unknown
	Sessions []Session
	LUNs     []LUN
	ACL      []string // tgt: initiator addresses/names allowed ("ALL")
	Accounts []string // tgt: CHAP users bound (" (outgoing)" kept)
	// Ports are the TCP ports the target is exported on, where its
	// source says: tgt's portals (all of tgtd's, for every target), LIO's
	// TPG network portals (np/), nvmet's ports' trsvcid; IET is not read
	// for them (nil).
	Ports []uint16
}

// Session is one logged-in initiator (tgt calls it an I_T nexus).
type Session struct {
	ID        uint64 // tgt I_T nexus id, IET sid, LIO session id
	Initiator string // initiator IQN
	Alias     string // "" when none
	Conns     []Conn
	// LUNs lists the target LUN numbers this session may use; nil means
	// all of the target's LUNs (tgt, IET, LIO dynamic sessions). LIO ACLs
	// map LUNs per initiator.
	LUNs []int
}

// Conn is one TCP connection of a session.
type Conn struct {
	CID   uint32
	Addr  netip.Addr // initiator address; invalid if the target did not say
	State string     // as the target reports it, e.g. "active"
}

// LUN is one logical unit and where its data lives.
type LUN struct {
	Number      int
	Type        string // tgt: "disk", "controller"; IET/LIO: "disk"
	BackingType string // tgt: "rdwr", "aio", "null"; IET: "fileio", "blockio"; LIO: "iblock", "fileio"
	Path        string // backing store path; "" for none (tgt's LUN 0 controller)
	Flags       string // tgt: "direct"; IET: iomode
}

// Addrs returns the distinct valid connection addresses of s.
func (s Session) Addrs() []netip.Addr {
	var out []netip.Addr
	for _, c := range s.Conns {
		if c.Addr.IsValid() && !slices.Contains(out, c.Addr) {
			out = append(out, c.Addr)
		}
	}
	return out
}

// DataLUNs returns the LUNs of t that carry data (have a backing path).
func (t Target) DataLUNs() []LUN {
	var out []LUN
	for _, l := range t.LUNs {
		if l.Path != "" {
			out = append(out, l)
		}
	}
	return out
}

// LUNRef names one LUN in a Snapshot.
type LUNRef struct {
	Target string // target IQN
	LUN    int
	Path   string // backing store path
	// Device is the block device whose /proc/diskstats line measures this
	// LUN alone ("loop3", "dm-2"); "" if none does (a plain file).
	Device string
}

// Resource is a shared pool: the LUNs whose backing stores lie on the same
// lowest devices, and so contend with each other.
type Resource struct {
	Name    string   // stable name derived from Pool, usable as a set name
	Pool    []string // lowest devices (sysfs names, or "dev-M:m" for a filesystem without one)
	LUNs    []LUNRef
	Devices []string // distinct LUNRef.Device values: the lines to sample
}

// Consumer is one initiator address and what it uses.
type Consumer struct {
	Addr       netip.Addr
	Initiators []string
	LUNs       []LUNRef
	Resources  []string
}

// Snapshot is who uses what at one moment.
type Snapshot struct {
	Resources []Resource
	Consumers []Consumer
	// Map is resource name → the addresses of its consumers, sorted: what
	// a per-resource consumer set is converged to.
	Map map[string][]netip.Addr
	// Problems lists what could not be mapped (unresolvable backing
	// stores, sessions without an address); the snapshot is still usable.
	Problems []string
	// Sources names the target software the snapshot was read from
	// ("tgt", "lio", "nvmet"): with discovery source auto, what it found
	// on the host. BuildSnapshot leaves it to its caller.
	Sources []string
	// Ports are the TCP ports the targets are exported on (Target.Ports,
	// all of them, sorted): where their consumers' traffic flows.
	Ports []uint16
}

// ConsumersOf returns the consumer addresses of resource name.
func (s Snapshot) ConsumersOf(name string) []netip.Addr { return s.Map[name] }

// BuildSnapshot joins targets with the block layer seen through r. A nil r
// skips block resolution: every LUN is then its own resource named by path.
func BuildSnapshot(targets []Target, r *Resolver) Snapshot {
	sb := &snapshotBuilder{
		snap:      Snapshot{Map: map[string][]netip.Addr{}},
		r:         r,
		resolved:  map[string]lunInfo{},
		resources: map[string]*Resource{},
		consumers: map[netip.Addr]*Consumer{},
	}
	for _, t := range targets {
		for _, p := range t.Ports {
			if !slices.Contains(sb.snap.Ports, p) {
				sb.snap.Ports = append(sb.snap.Ports, p)
			}
		}
		byNum := sb.addLUNs(t)
		for _, s := range t.Sessions {
			sb.addSession(t, s, byNum)
		}
	}
	return sb.finish()
}

// lunInfo is a LUN's reference and the pool of devices behind it.
type lunInfo struct {
	ref  LUNRef
	pool []string
}

// snapshotBuilder is BuildSnapshot's state: the snapshot so far and the
// resources and consumers it is collecting.
type snapshotBuilder struct {
	snap      Snapshot
	r         *Resolver
	resolved  map[string]lunInfo // by backing path: one lookup per path
	resources map[string]*Resource
	consumers map[netip.Addr]*Consumer
}

// lookup resolves LUN l of target iqn to its pool, once per backing path.
func (sb *snapshotBuilder) lookup(iqn string, l LUN) lunInfo {
	if li, ok := sb.resolved[l.Path]; ok {
		li.ref.Target, li.ref.LUN = iqn, l.Number
		return li
	}
	li := lunInfo{ref: LUNRef{Target: iqn, LUN: l.Number, Path: l.Path}}
	if sb.r != nil {
		bd, err := sb.r.Resolve(l.Path)
		if err != nil {
			sb.snap.Problems = append(sb.snap.Problems, err.Error())
		}
		li.ref.Device, li.pool = bd.Name, bd.Pool
	}
	if len(li.pool) == 0 {
		li.pool = []string{"path:" + l.Path}
	}
	sb.resolved[l.Path] = li
	return li
}

// addLUNs adds target t's data LUNs to their resources and returns them
// by LUN number.
func (sb *snapshotBuilder) addLUNs(t Target) map[int]lunInfo {
	byNum := map[int]lunInfo{}
	for _, l := range t.DataLUNs() {
		li := sb.lookup(t.IQN, l)
		byNum[l.Number] = li
		name := poolName(li.pool)
		res := sb.resources[name]
		if res == nil {
			res = &Resource{Name: name, Pool: li.pool}
			sb.resources[name] = res
		}
		if !slices.Contains(res.LUNs, li.ref) {
			res.LUNs = append(res.LUNs, li.ref)
		}
		if li.ref.Device != "" && !slices.Contains(res.Devices, li.ref.Device) {
			res.Devices = append(res.Devices, li.ref.Device)
		}
	}
	return byNum
}

// addSession makes each address of session s on target t a consumer of
// the LUNs (byNum: t's, by number) the session uses, and of their
// resources.
func (sb *snapshotBuilder) addSession(t Target, s Session, byNum map[int]lunInfo) {
	addrs := s.Addrs()
	if len(addrs) == 0 {
		sb.snap.Problems = append(sb.snap.Problems, "session of "+s.Initiator+" on "+t.IQN+" has no connection address")
		return
	}
	var used []lunInfo
	for _, l := range t.DataLUNs() {
		if s.LUNs == nil || slices.Contains(s.LUNs, l.Number) {
			used = append(used, byNum[l.Number])
		}
	}
	for _, a := range addrs {
		c := sb.consumers[a]
		if c == nil {
			c = &Consumer{Addr: a}
			sb.consumers[a] = c
		}
		if !slices.Contains(c.Initiators, s.Initiator) {
			c.Initiators = append(c.Initiators, s.Initiator)
		}
		for _, li := range used {
			if !slices.Contains(c.LUNs, li.ref) {
				c.LUNs = append(c.LUNs, li.ref)
			}
			rn := poolName(li.pool)
			if !slices.Contains(c.Resources, rn) {
				c.Resources = append(c.Resources, rn)
			}
			if !slices.Contains(sb.snap.Map[rn], a) {
				sb.snap.Map[rn] = append(sb.snap.Map[rn], a)
			}
		}
	}
}

// finish returns the snapshot with its resources and consumers, each
// sorted, as is every list in them.
func (sb *snapshotBuilder) finish() Snapshot {
	snap := sb.snap
	slices.Sort(snap.Ports)
	for _, res := range sb.resources {
		sort.Strings(res.Devices)
		snap.Resources = append(snap.Resources, *res)
	}
	sort.Slice(snap.Resources, func(i, j int) bool { return snap.Resources[i].Name < snap.Resources[j].Name })
	for _, c := range sb.consumers {
		sort.Strings(c.Initiators)
		sort.Strings(c.Resources)
		snap.Consumers = append(snap.Consumers, *c)
	}
	sort.Slice(snap.Consumers, func(i, j int) bool { return snap.Consumers[i].Addr.Less(snap.Consumers[j].Addr) })
	for k := range snap.Map {
		slices.SortFunc(snap.Map[k], func(a, b netip.Addr) int { return a.Compare(b) })
	}
	return snap
}

// poolName names a pool by its sorted lowest devices, so that the same
// hardware gets the same name on every discovery pass.
func poolName(pool []string) string {
	p := slices.Clone(pool)
	sort.Strings(p)
	return strings.Join(p, "+")
}

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("discover: syntax error")
