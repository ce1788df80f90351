package discover

import (
	"fmt"
	"os"
	"path/filepath"
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
	// one per queue (an admin queue and nr_io_queues I/O queues).
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
