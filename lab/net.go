package lab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Namespaces are every namespace the lab can own (every possible target
// host): what Down removes and Leftovers reports.
func Namespaces() []string { return Options{Targets: MaxTargets}.namespaces() }

// namespaces are the namespaces a lab built with o has.
func (o Options) namespaces() []string {
	ns := []string{SwitchNS}
	for _, t := range o.TargetHosts() {
		ns = append(ns, t.NS)
	}
	return append(ns, Hosts...)
}

// hostNamespaces are o's target and initiator namespaces (each with a
// veth on the bridge).
func (o Options) hostNamespaces() []string { return o.namespaces()[1:] }

func nsExists(ns string) bool {
	_, err := os.Stat(filepath.Join("/run/netns", ns))
	return err == nil
}

// setupNetwork creates the switch namespace with a bridge and one veth per
// host namespace. Idempotent per namespace: an existing one is kept.
func setupNetwork(o Options) error {
	if !nsExists(SwitchNS) {
		if err := addNetns(SwitchNS); err != nil {
			return err
		}
		steps := [][]string{
			{"-n", SwitchNS, "link", "add", bridgeName, "type", "bridge"},
			{"-n", SwitchNS, "link", "set", bridgeName, "up"},
			{"-n", SwitchNS, "link", "set", "lo", "up"},
		}
		for _, s := range steps {
			if _, err := Exec("ip", s...); err != nil {
				return err
			}
		}
	}
	addrs := map[string]netip.Addr{}
	for _, t := range o.TargetHosts() {
		addrs[t.NS] = t.Addr
	}
	for _, h := range Hosts {
		addrs[h] = HostAddr(h)
	}
	for _, ns := range o.hostNamespaces() {
		if nsExists(ns) {
			continue
		}
		if !IsTargetNS(ns) && o.iscsiKernel() {
			// The client's network is in the initial namespace (kinit.go).
			if err := addNetns(ns); err != nil {
				return err
			}
			if err := setupKernelClient(ns); err != nil {
				return err
			}
			continue
		}
		addr := addrs[ns]
		port := "p-" + ns
		if err := addNetns(ns); err != nil {
			return err
		}
		steps := [][]string{
			{"-n", SwitchNS, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns},
			{"-n", SwitchNS, "link", "set", port, "master", bridgeName, "up"},
			{"-n", ns, "addr", "add", addr.String() + "/24", "dev", "eth0"},
			{"-n", ns, "link", "set", "eth0", "up"},
			{"-n", ns, "link", "set", "lo", "up"},
			// Sessions take their route's congestion control, both ends.
			{"-n", ns, "route", "change", netip.PrefixFrom(addr, 24).Masked().String(), "dev", "eth0", "proto", "kernel", "scope", "link",
				"src", addr.String(), "congctl", LabCongestion},
		}
		for _, s := range steps {
			if _, err := Exec("ip", s...); err != nil {
				return err
			}
		}
	}
	if err := steerByFlow(); err != nil {
		return err
	}
	if o.TargetRmem > 0 {
		v := fmt.Sprintf("4096 %d %d", min(o.TargetRmem, 131072), o.TargetRmem)
		for _, t := range o.TargetHosts() {
			if _, err := InNS(t.NS, "sysctl", "-q", "-w", "net.ipv4.tcp_rmem="+v); err != nil {
				return err
			}
		}
	}
	if o.targetCount() > 1 {
		// etcd listens on the bridge itself, in the switch namespace:
		// every target host reaches it, and no extra namespace is needed.
		out, _ := Exec("ip", "-n", SwitchNS, "-br", "addr", "show", bridgeName)
		if !strings.Contains(out, EtcdAddr.String()+"/") {
			if _, err := Exec("ip", "-n", SwitchNS, "addr", "add", EtcdAddr.String()+"/24", "dev", bridgeName); err != nil {
				return err
			}
		}
	}
	return nil
}

// LabCongestion is the TCP congestion control of the lab's sessions, set
// on each host's route to the others: Linux's default, whatever this
// machine's is. A namespace inherits the initial one's, and may not set
// its own to one outside tcp_allowed_congestion_control; this VM's is
// BBR, whose bandwidth estimate of the reader's request-response flow
// collapsed now and then, pacing a read's last segment 80-100 ms behind
// its head in 3 % of the reads (docs/reader-latency.md).
const LabCongestion = "cubic"

// steerByFlow turns on RPS on every veth end, so each flow's packets are
// received on one CPU, as a NIC's RSS does. Without it a veth hands a
// packet to the backlog of whichever CPU its sender runs on: a writer
// thread moved between CPUs mid-burst overtakes its own segments, and the
// target answers with SACKs that make the writer fast-retransmit (seen in
// a regulated autonomic run: 3 segments, DSACKed, a lab artefact counted
// as ours). Idempotent.
func steerByFlow() error {
	mask := fmt.Sprintf("%x", uint64(1)<<min(runtime.NumCPU(), 32)-1)
	for _, e := range vethEnds() {
		if err := writeInNS(e.NS, e.RPSPath(), mask); err != nil {
			return err
		}
	}
	return nil
}

// vethEnd is one end of a host's veth pair: eth0 in the host's namespace
// (with the kernel initiator sq-HOST in the initial one, NS ""), p-HOST
// on the bridge.
type vethEnd struct{ NS, Dev string }

// RPSPath is the sysfs file of its receive queue's RPS CPU mask.
func (e vethEnd) RPSPath() string { return "/sys/class/net/" + e.Dev + "/queues/rx-0/rps_cpus" }

func vethEnds() []vethEnd {
	var ends []vethEnd
	for _, ns := range Namespaces()[1:] {
		if !nsExists(ns) {
			continue
		}
		host := vethEnd{ns, "eth0"}
		if _, err := os.Stat("/sys/class/net/" + KernelClientDev(ns)); err == nil && !IsTargetNS(ns) {
			host = vethEnd{"", KernelClientDev(ns)}
		}
		ends = append(ends, host, vethEnd{SwitchNS, "p-" + ns})
	}
	return ends
}

// addNetns creates namespace ns and records it with its inode.
func addNetns(ns string) error {
	if _, err := Exec("ip", "netns", "add", ns); err != nil {
		return err
	}
	return record("netns", ns, nsInode(ns))
}

// nsPids lists processes whose network namespace is the named one, so Down
// can stop stragglers (a fio left by a killed run) before deleting it.
func nsPids(ns string) []int {
	target, err := os.Stat(filepath.Join("/run/netns", ns))
	if err != nil {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.Stat(filepath.Join("/proc", e.Name(), "ns", "net"))
		if err == nil && os.SameFile(st, target) {
			pids = append(pids, pid)
		}
	}
	return pids
}
