package lab

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
)

// MaxTargets bounds `lab up --targets`: one target host per writer host,
// so every target serves a writer (Hosts[1:]).
const MaxTargets = 3

// TargetHost is one iSCSI target host of the lab: a namespace with its
// own tgtd (its own control port) and portal, all in front of the same
// modelled shared resource, as the target hosts or gateways of a SAN are
// in front of one back end.
type TargetHost struct {
	NS      string     `json:"ns"`
	Addr    netip.Addr `json:"addr"`
	CtlPort int        `json:"tgtd_control_port"`
}

// Target returns target host i: bm (10.99.0.1, tgtd -C 31) first, then
// bm2 (10.99.0.12, -C 32), bm3 (10.99.0.13, -C 33).
func Target(i int) TargetHost {
	if i == 0 {
		return TargetHost{NS: TargetNS, Addr: TargetAddr, CtlPort: TgtdPort}
	}
	return TargetHost{NS: fmt.Sprintf("%s%d", TargetNS, i+1), Addr: netip.MustParseAddr(fmt.Sprintf("%s1%d", subnet, i+1)), CtlPort: TgtdPort + i}
}

func (t TargetHost) port() string { return strconv.Itoa(t.CtlPort) }

// allTargets are every target host the lab can have: Down and Leftovers
// look for all of them, whatever the state says.
func allTargets() []TargetHost {
	var ts []TargetHost
	for i := range MaxTargets {
		ts = append(ts, Target(i))
	}
	return ts
}

// targetCount is o's number of target hosts (0, from a state written
// before --targets existed, is 1).
func (o Options) targetCount() int { return max(o.Targets, 1) }

// TargetHosts are the lab's target hosts.
func (o Options) TargetHosts() []TargetHost { return allTargets()[:o.targetCount()] }

// TargetOf is the target host an initiator connects through: the reader
// (b2) and the first writer host through bm, the other writer hosts
// spread over the rest, so with three targets every target serves a
// writer and only bm serves the reader.
func (o Options) TargetOf(host string) TargetHost {
	for j, h := range Hosts[1:] {
		if h == host {
			return Target(j % o.targetCount())
		}
	}
	return Target(0)
}

// IsTargetNS reports whether ns is one of the lab's target namespaces.
func IsTargetNS(ns string) bool {
	return slices.ContainsFunc(allTargets(), func(t TargetHost) bool { return t.NS == ns })
}
