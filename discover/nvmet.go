package discover

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// NVMePort is one port of the kernel NVMe target (nvmet): where hosts
// connect, and which subsystems they reach there.
type NVMePort struct {
	ID         int
	Transport  string // addr_trtype: "tcp", "rdma", "loop", "fc"
	Family     string // addr_adrfam: "ipv4", "ipv6"; "" for loop
	Addr       string // addr_traddr, as written ("0.0.0.0" listens on all)
	Service    string // addr_trsvcid: the TCP port for tcp ("4420")
	Subsystems []string
}

// NVMet is what the kernel NVMe target's configfs says.
type NVMet struct {
	// Subsystems come back as Targets so that BuildSnapshot groups their
	// namespaces into resources as it does iSCSI LUNs: IQN holds the
	// subsystem NQN, each enabled namespace is a LUN numbered by its NSID,
	// and ACL is the allowed host NQNs, or "ALL" with attr_allow_any_host.
	// Sessions stay empty: nvmet's configfs (Debian 6.1) has no view of
	// connected hosts; they are the TCP connections to a port's service,
	// one per queue (an admin queue and nr_io_queues I/O queues), which
	// WithHosts adds.
	Subsystems []Target
	Ports      []NVMePort
}

// ReadNVMet reads nvmet's configfs tree under root (normally
// /sys/kernel/config/nvmet). Layout, as drivers/nvme/target/configfs.c
// builds it and nvmetcli or a script fills it:
//
//	subsystems/<nqn>/attr_allow_any_host                 (1: any host may connect)
//	subsystems/<nqn>/allowed_hosts/<host nqn> → ../../../../nvmet/hosts/<host nqn>
//	subsystems/<nqn>/namespaces/<nsid>/{device_path,enable}
//	ports/<id>/addr_{trtype,adrfam,traddr,trsvcid}
//	ports/<id>/subsystems/<nqn> → ../../../../nvmet/subsystems/<nqn>
//
// A namespace that is not enabled serves no I/O and is left out. Like the
// rest of discover it only reads: a missing root is an error (the nvmet
// module is not loaded or configfs is not mounted), an unreadable file
// inside a subsystem or port is one too.
func ReadNVMet(root string) (NVMet, error) {
	var n NVMet
	subs, err := os.ReadDir(filepath.Join(root, "subsystems"))
	if err != nil {
		return n, fmt.Errorf("discover: nvmet: %w", err)
	}
	for _, e := range subs {
		if !e.IsDir() {
			continue
		}
		t, err := readNVMeSubsystem(filepath.Join(root, "subsystems", e.Name()))
		if err != nil {
			return n, err
		}
		n.Subsystems = append(n.Subsystems, t)
	}
	ports, err := numberedDirs(filepath.Join(root, "ports"))
	if err != nil {
		return n, err
	}
	for _, id := range ports {
		p, err := readNVMePort(filepath.Join(root, "ports", strconv.Itoa(id)), id)
		if err != nil {
			return n, err
		}
		n.Ports = append(n.Ports, p)
	}
	for i := range n.Subsystems {
		n.Subsystems[i].Ports = n.tcpServices(n.Subsystems[i].IQN)
	}
	return n, nil
}

// numberedDirs returns the numbers of dir's subdirectories named by one
// (ports by ID, namespaces by NSID), in numeric order: configfs lists
// them by name, which puts 10 before 2.
func numberedDirs(dir string) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("discover: nvmet: %w", err)
	}
	var ns []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
			ns = append(ns, n)
		}
	}
	sort.Ints(ns)
	return ns, nil
}

func readNVMeSubsystem(dir string) (Target, error) {
	t := Target{IQN: filepath.Base(dir)}
	anyHost, err := nvmetAttr(dir, "attr_allow_any_host")
	if err != nil {
		return t, err
	}
	if anyHost == "1" {
		t.ACL = []string{"ALL"}
	} else if hosts, err := os.ReadDir(filepath.Join(dir, "allowed_hosts")); err == nil {
		for _, h := range hosts {
			t.ACL = append(t.ACL, h.Name())
		}
	}
	nsids, err := numberedDirs(filepath.Join(dir, "namespaces"))
	if err != nil {
		return t, err
	}
	for _, nsid := range nsids {
		ns := filepath.Join(dir, "namespaces", strconv.Itoa(nsid))
		enabled, err := nvmetAttr(ns, "enable")
		if err != nil {
			return t, err
		}
		if enabled != "1" {
			continue
		}
		path, err := nvmetAttr(ns, "device_path")
		if err != nil {
			return t, err
		}
		t.LUNs = append(t.LUNs, LUN{Number: nsid, Type: "disk", Path: path})
	}
	return t, nil
}

func readNVMePort(dir string, id int) (NVMePort, error) {
	p := NVMePort{ID: id}
	for _, f := range []struct {
		name string
		to   *string
	}{{"addr_trtype", &p.Transport}, {"addr_adrfam", &p.Family}, {"addr_traddr", &p.Addr}, {"addr_trsvcid", &p.Service}} {
		v, err := nvmetAttr(dir, f.name)
		if err != nil {
			return p, err
		}
		*f.to = v
	}
	subs, err := os.ReadDir(filepath.Join(dir, "subsystems"))
	if err != nil {
		return p, fmt.Errorf("discover: nvmet: %w", err)
	}
	for _, s := range subs {
		p.Subsystems = append(p.Subsystems, s.Name())
	}
	return p, nil
}

// nvmetAttr returns a configfs attribute without its newline. nvmet prints
// an unset address family as "" and a loop port's address as "", so an
// empty value is not an error.
func nvmetAttr(dir, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "", fmt.Errorf("discover: nvmet: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// NVMeConn is one TCP connection to the NVMe target: its two ends, from
// the target host's socket table, and the host and subsystem NQNs of its
// Fabrics Connect where that was seen on the wire ("" otherwise).
type NVMeConn struct {
	Local, Peer     netip.AddrPort
	HostNQN, SubNQN string
}

// WithHosts returns the subsystems with their hosts as sessions: one
// session per subsystem and host address, one Conn per connection, so a
// controller's admin and I/O queues (and a host's several controllers)
// are one consumer. A connection goes to the subsystem its Connect named;
// without one, to the subsystems its port exports — all of them where
// the port exports several, since nothing else says which (Alias
// "unconfirmed" marks those sessions).
func (n NVMet) WithHosts(conns []NVMeConn) []Target {
	out := make([]Target, len(n.Subsystems))
	index := map[string]int{}
	for i, t := range n.Subsystems {
		out[i] = t
		out[i].Sessions = nil
		index[t.IQN] = i
	}
	type key struct {
		sub  int
		addr netip.Addr
	}
	sessions := map[key]int{}
	sure := map[key]bool{}
	for _, c := range conns {
		subs, unsure := n.subsystemsOf(c)
		for _, name := range subs {
			i, ok := index[name]
			if !ok {
				continue
			}
			k := key{i, c.Peer.Addr()}
			j, ok := sessions[k]
			if !ok {
				out[i].Sessions = append(out[i].Sessions, Session{ID: uint64(len(out[i].Sessions) + 1), Initiator: "host at " + c.Peer.Addr().String()})
				j = len(out[i].Sessions) - 1
				sessions[k] = j
			}
			s := &out[i].Sessions[j]
			if c.HostNQN != "" {
				s.Initiator = c.HostNQN
			}
			sure[k] = sure[k] || !unsure
			s.Conns = append(s.Conns, Conn{CID: uint32(c.Peer.Port()), Addr: c.Peer.Addr(), State: "established"})
		}
	}
	for k, j := range sessions {
		if !sure[k] {
			out[k.sub].Sessions[j].Alias = "unconfirmed"
		}
	}
	return out
}

// subsystemsOf is the subsystems connection c may use: the one its
// Connect named if its port exports that, else every subsystem of its
// port (unsure when more than one).
func (n NVMet) subsystemsOf(c NVMeConn) (subs []string, unsure bool) {
	for _, p := range n.Ports {
		if p.Transport != "tcp" || p.Service != strconv.Itoa(int(c.Local.Port())) {
			continue
		}
		if a, err := netip.ParseAddr(p.Addr); err == nil && !a.IsUnspecified() && a != c.Local.Addr().Unmap() {
			continue
		}
		for _, s := range p.Subsystems {
			if c.SubNQN == s {
				return []string{s}, false
			}
			if !slices.Contains(subs, s) {
				subs = append(subs, s)
			}
		}
	}
	return subs, len(subs) > 1
}

// TCPServices are the TCP ports of n's ports, whose connections are its
// hosts'.
func (n NVMet) TCPServices() []uint16 { return n.tcpServices("") }

// tcpServices are the TCP ports of n's ports that export subsystem sub
// ("": of every port).
func (n NVMet) tcpServices(sub string) []uint16 {
	var out []uint16
	for _, p := range n.Ports {
		v, err := strconv.ParseUint(p.Service, 10, 16)
		if sub != "" && !slices.Contains(p.Subsystems, sub) {
			continue
		}
		if p.Transport == "tcp" && err == nil && !slices.Contains(out, uint16(v)) {
			out = append(out, uint16(v))
		}
	}
	return out
}
