// Package lab is the real iSCSI testbed of DESIGN.md on one machine, and
// only the testbed: network namespaces bm (target) and b2..b5 (initiators)
// on a Linux bridge, tgtd or LIO in bm serving one target per resource with
// one LUN per initiator, each LUN a loop device on a shared modelled disk
// (or the real disk), fio with the libiscsi engine or the kernel initiator
// as the initiators' workload, the guest hooks of the stock-kernel tier,
// the resource's capacity, and the Runner that runs phases of load on it
// and records trace.csv. The experiments that use it are package
// lab/experiments.
//
// It may import agent (its client, for the agent it starts), sample,
// report (the trace's types), internal/guestenv and lab/diskmodel; it must
// not import lab/experiments or know any experiment. Everything it creates is labelled (fixed namespace names,
// paths under StateDir and StoreDir, tgtd's private control port) so that
// Down finds and removes it even after a crash. It must not touch any
// namespace, loop device, process or file that is not its own.
//
// Imports (sanqos): agent, internal/guestenv, lab/diskmodel, report, sample.
package lab

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/sanqos/sanqos/lab/diskmodel"
)

// Paths and names that label the lab's kernel and filesystem objects.
const (
	StateDir   = "/run/sanqos-lab"
	StoreDir   = "/dev/shm/sanqos-lab"      // tmpfs: the modelled disk's data
	RealDir    = "/var/lib/sanqos-lab/real" // --real-disk backing files
	SwitchNS   = "sqlan"                    // namespace holding the bridge
	TargetNS   = "bm"
	TgtdPort   = 31 // tgtd -C: its control socket is /var/run/tgtd/socket.31
	ISCSIPort  = 3260
	IQNPrefix  = "iqn.2026-11.lab:"
	subnet     = "10.99.0."
	bridgeName = "br0"
	// ServeLog outlives Down so a failed Up can be diagnosed.
	ServeLog = "/run/sanqos-lab-serve.log"
)

// Hosts are the initiator namespaces, in LUN order.
var Hosts = []string{"b2", "b3", "b4", "b5"}

// TargetAddr is the target's portal address inside the lab.
var TargetAddr = netip.MustParseAddr(subnet + "1")

// HostAddr returns an initiator's address (b2 → 10.99.0.2).
func HostAddr(host string) netip.Addr {
	var n int
	fmt.Sscanf(host, "b%d", &n)
	return netip.MustParseAddr(fmt.Sprintf("%s%d", subnet, n))
}

// Options choose what Up builds.
type Options struct {
	Resources []string         `json:"resources"` // shared pools, one iSCSI target each
	LUNSize   int64            `json:"lun_size"`  // bytes per LUN
	RealDisk  bool             `json:"real_disk"` // back LUNs by files on the machine's disk
	Model     diskmodel.Params `json:"model"`
	// TargetRmem caps the target's TCP receive buffer (bytes, 0 = kernel
	// default). It bounds how much write data an initiator may have in
	// flight per round trip, which is what lets delayed ACKs throttle
	// writes (thesis 4.1, seed 001 ch. 4); see README "Lab".
	TargetRmem int `json:"target_rmem"`
	// Targets is the number of target hosts (namespaces bm, bm2, bm3,
	// each with its own tgtd) in front of the shared resources; with more
	// than one, Up also starts an etcd server for cluster control (see
	// EtcdURL). 0 means 1.
	Targets int `json:"targets,omitempty"`
	// Target is the storage target: "tgt" (tgtd, the default), "lio" (the
	// kernel's LIO, configured through configfs; lio.go) or "nvmet" (the
	// kernel's NVMe/TCP target, through configfs; nvmet.go).
	Target string `json:"target,omitempty"`
	// Initiator is the clients' iSCSI initiator: "libiscsi" (fio's
	// libiscsi engine in each client namespace, the default) or "kernel"
	// (open-iscsi: iscsid and the kernel's iscsi_tcp, one session per
	// client, fio on the block device; kinit.go).
	Initiator string `json:"initiator,omitempty"`
}

// Target kinds and initiator kinds of Options.
const (
	TargetTgt         = "tgt"
	TargetLIO         = "lio"
	TargetNVMet       = "nvmet"
	InitiatorLibiscsi = "libiscsi"
	InitiatorKernel   = "kernel"
)

// TargetKind is the options' target, "tgt" where unset.
func (o Options) TargetKind() string {
	if o.Target == "" {
		return TargetTgt
	}
	return o.Target
}

// iscsiKernel reports whether the clients are open-iscsi's kernel
// initiator, whose network is the initial namespace's (kinit.go); the
// NVMe/TCP host connects from each client's namespace (nvmet.go).
func (o Options) iscsiKernel() bool {
	return o.InitiatorKind() == InitiatorKernel && o.TargetKind() != TargetNVMet
}

// InitiatorKind is the options' initiator, "libiscsi" where unset.
func (o Options) InitiatorKind() string {
	if o.Initiator == "" {
		return InitiatorLibiscsi
	}
	return o.Initiator
}

// DefaultTargetRmem caps the target's TCP receive buffer in the lab.
// Delaying ACKs throttles a write once per TCP window round it spans; the
// thesis measured ~2.3 rounds per 64 KiB write (one stream: 15 MB/s at no
// delay, 2.5 MB/s at 9.6 ms). Linux 6.x's default 128 KiB initial window
// fits a whole write in one round, and then twelve writers on the modelled
// group would need ~27 ms of delay to hold 15 ms, beyond the 20 ms
// maximum. 48 KiB (a ~24 KiB window: ~3 rounds per write, measured 13.0 →
// 1.7 MB/s over 0–9.6 ms) puts the needed delay near 11 ms; 64 KiB left it
// at the 20 ms ceiling. Without it (--target-rmem 0) the lab shows the
// single-round case.
const DefaultTargetRmem = 48 << 10

// DefaultOptions is the lab of DESIGN.md: one resource, 1 GiB LUNs, the
// modelled disk group.
func DefaultOptions() Options {
	return Options{Resources: []string{"vg1"}, LUNSize: 1 << 30, Model: diskmodel.DefaultParams(), TargetRmem: DefaultTargetRmem}
}

// Validate checks options as a whole before anything is created.
func (o Options) Validate() error {
	if len(o.Resources) == 0 || len(o.Resources) > 8 {
		return fmt.Errorf("resources: want 1..8, got %d", len(o.Resources))
	}
	seen := map[string]bool{}
	for _, r := range o.Resources {
		if r == "" || len(r) > 32 || !isName(r) || seen[r] {
			return fmt.Errorf("resource name %q: want unique [a-z0-9-], at most 32 characters", r)
		}
		seen[r] = true
	}
	if o.LUNSize < 64<<20 || o.LUNSize > 64<<30 {
		return fmt.Errorf("lun size %d: want 64 MiB..64 GiB", o.LUNSize)
	}
	switch o.TargetKind() {
	case TargetTgt, TargetLIO:
	case TargetNVMet:
		if o.InitiatorKind() != InitiatorKernel {
			return errors.New("target nvmet: the clients are the kernel's NVMe/TCP host (--initiator kernel)")
		}
	default:
		return fmt.Errorf("target %q: want tgt, lio or nvmet", o.Target)
	}
	switch o.InitiatorKind() {
	case InitiatorLibiscsi, InitiatorKernel:
	default:
		return fmt.Errorf("initiator %q: want libiscsi or kernel", o.Initiator)
	}
	if o.TargetRmem != 0 && (o.TargetRmem < 4096 || o.TargetRmem > 64<<20) {
		return fmt.Errorf("target rmem %d: want 0 (default) or 4 KiB..64 MiB", o.TargetRmem)
	}
	if o.Targets < 0 || o.Targets > MaxTargets {
		return fmt.Errorf("targets %d: want 1..%d", o.Targets, MaxTargets)
	}
	if o.targetCount() > 1 && (o.TargetKind() != TargetTgt || o.InitiatorKind() != InitiatorLibiscsi) {
		return fmt.Errorf("targets %d: several target hosts are built with tgt and libiscsi only (not %s and %s)", o.Targets, o.TargetKind(), o.InitiatorKind())
	}
	if !o.RealDisk {
		return o.Model.Validate()
	}
	return nil
}

// same reports whether a lab built with o is the one p asks for.
func (o Options) same(p Options) bool {
	o.Targets, p.Targets = o.targetCount(), p.targetCount()
	a, _ := json.Marshal(o)
	b, _ := json.Marshal(p)
	return bytes.Equal(a, b)
}

func isName(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// LUN is one initiator's logical volume on a resource.
type LUN struct {
	Host    string `json:"host"`
	Target  string `json:"target,omitempty"` // target host's namespace (empty: bm)
	Number  int    `json:"lun"`
	File    string `json:"file"`    // backing file the loop device reads
	Store   string `json:"store"`   // where its bytes live
	Loop    string `json:"loop"`    // e.g. "loop3"
	URL     string `json:"url"`     // fio's filename: libiscsi URL, or the kernel initiator's block device
	Backing string `json:"backing"` // the target's backing store path (/dev/loopN)
	// Device is the kernel initiator's block device of this LUN ("sdc"),
	// "" with libiscsi.
	Device string `json:"device,omitempty"`
}

// Resource is one shared pool and its iSCSI target.
type Resource struct {
	Name  string `json:"name"`
	TID   int    `json:"tid"`
	IQN   string `json:"iqn"`
	Mount string `json:"mount,omitempty"` // FUSE mount (modelled disk)
	Store string `json:"store"`
	LUNs  []LUN  `json:"luns"`
}

// Capacity is what the shared resource delivered in Up's calibration.
type Capacity struct {
	SeqWriteMBs   float64 `json:"seq_write_mb_s"` // 64 KiB sequential writes, 4 streams
	RandReadIOPS  float64 `json:"rand_read_iops"` // 8 KiB random reads, one at a time
	RandReadMs    float64 `json:"rand_read_ms"`   // their mean latency
	MeasuredAt    string  `json:"measured_at"`
	MeasuredOnDir string  `json:"measured_on"`
}

// State is the lab as built, saved in StateDir/state.json.
type State struct {
	Options   Options    `json:"options"`
	Resources []Resource `json:"resources"`
	// RAM is a target whose LUN (b2 only) lives in memory with no model:
	// the overhead experiment's "RAM disk", where any cost of the
	// throttle's rules shows instead of drowning in disk time.
	RAM      *Resource  `json:"ram,omitempty"`
	ServePID int        `json:"serve_pid"`
	Capacity []Capacity `json:"capacity"`
	Created  time.Time  `json:"created"`
}

func statePath() string { return filepath.Join(StateDir, "state.json") }

// LoadState reads the saved state; os.ErrNotExist when the lab is down.
func LoadState() (*State, error) {
	b, err := os.ReadFile(statePath())
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", statePath(), err)
	}
	return &s, nil
}

func (s *State) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return WriteAtomic(statePath(), b, 0o600)
}

// WriteAtomic replaces path with b: written beside it, then renamed over
// it, so no reader (nor a crash) ever sees half a file.
func WriteAtomic(path string, b []byte, perm os.FileMode) error {
	if err := os.WriteFile(path+".tmp", b, perm); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// WriteJSON saves v as indented JSON ending in a newline: a run's
// summaries and records.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// targets are every iSCSI target the lab serves.
func (s *State) targets() []Resource {
	if s.RAM == nil {
		return s.Resources
	}
	return append(append([]Resource(nil), s.Resources...), *s.RAM)
}

// Resource returns the named resource.
func (s *State) Resource(name string) (*Resource, error) {
	for i := range s.Resources {
		if s.Resources[i].Name == name {
			return &s.Resources[i], nil
		}
	}
	return nil, fmt.Errorf("no resource %q in the lab", name)
}

// LUNOf returns host's LUN on resource r.
func (r *Resource) LUNOf(host string) (*LUN, error) {
	for i := range r.LUNs {
		if r.LUNs[i].Host == host {
			return &r.LUNs[i], nil
		}
	}
	return nil, fmt.Errorf("resource %s has no LUN for %s", r.Name, host)
}

// ErrNotRoot is returned when the lab is driven without root.
var ErrNotRoot = errors.New("the lab must run as root (network namespaces, loop devices, tgtd)")
