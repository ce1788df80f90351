package config

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sanqos/sanqos/nvmetcp"
)

// NoResources is nil if c lists resources, else why a config without any
// is most likely a mistake. It is only a warning of validate's: a cluster
// member's resources can come from the cluster policy.
func (c *Config) NoResources() error {
	if len(c.Resources) > 0 {
		return nil
	}
	return Error{Field: "resources", Msg: "none listed: the agent would start but protect nothing (list the shared pools under resources:, see examples/sanqos.yaml; a cluster member may get them from the cluster policy)"}
}

// validateResources checks every resource, then what holds across them.
func (c *Config) validateResources(p *problems) {
	if err := c.NoResources(); err != nil {
		p.warn(err.(Error))
	}
	if len(c.Resources) > MaxResources {
		p.bad(fmt.Sprintf("%d resources, limit %d", len(c.Resources), MaxResources), "resources")
	}
	names := map[string]int{}
	consumers := 0
	for i := range c.Resources {
		consumers += c.validateResource(p, i, names)
	}
	c.validateBridge(p)
	if consumers > MaxConsumers {
		p.bad(fmt.Sprintf("%d static consumers, limit %d", consumers, MaxConsumers), "resources")
	}
	if c.Discovery.Source == "static" {
		for i, r := range c.Resources {
			if len(r.Devices) == 1 && r.Devices[0] == "auto" {
				p.by("discovery", "source").bad("static discovery needs explicit devices", "resources", i, "devices")
			}
		}
	}
}

// validateResource checks resource i, its name against the names before
// it (by their lines), and returns how many static consumers it lists.
func (c *Config) validateResource(p *problems, i int, names map[string]int) (consumers int) {
	bad := p.bad
	r := &c.Resources[i]
	if r.Name == "" || len(r.Name) > 64 || strings.ContainsAny(r.Name, " \t\n/\"") {
		bad("want a non-empty name without spaces, quotes or slashes (≤ 64)", "resources", i, "name")
	} else if line, dup := names[r.Name]; dup {
		bad(fmt.Sprintf("the name of the resource on line %d already", line), "resources", i, "name")
	} else {
		names[r.Name] = lineOf(p.root, "resources", i, "name")
	}
	// 0: set to 0, or the top-level one was invalid (and reported).
	if !thresholdOK(r.Threshold) && (r.Threshold != 0 || inFile(p.root, "resources", i, "threshold")) {
		bad(thresholdWant("leave it out for the top-level threshold"), "resources", i, "threshold")
	}
	for k, d := range r.Devices {
		if d == "" || strings.ContainsAny(d, "/ \t") && d != "auto" {
			bad("want a diskstats device name (e.g. loop3, sdb) or auto", "resources", i, "devices", k)
		}
	}
	// An objective the resource does not set is the top-level one,
	// reported (if invalid) at its own line.
	if !slices.Contains(Objectives, r.Objective) && inFile(p.root, "resources", i, "objective") {
		bad("want "+strings.Join(Objectives, "|"), "resources", i, "objective")
	}
	if !slices.Contains(Policies, r.Policy) {
		bad("want "+strings.Join(Policies, "|"), "resources", i, "policy")
	}
	c.validatePolicy(p, i)
	c.validateReservations(p, i)
	for k, a := range r.Important {
		if _, err := netip.ParseAddr(a); err != nil {
			bad("not an IP address", "resources", i, "important", k)
		}
	}
	for k, a := range r.Throttleable {
		if _, err := netip.ParseAddr(a); err != nil {
			bad("not an IP address", "resources", i, "throttleable", k)
		}
	}
	consumers += len(r.Important) + len(r.Throttleable)
	c.warnListedTwice(p, i)
	return consumers
}

// validateBridge checks what bridge mode needs and refuses its settings
// in target mode: every resource named by portals (distinct across
// resources), no devices (there is no diskstats), and a capture interface.
func (c *Config) validateBridge(p *problems) {
	bad := p.bad
	if c.Mode != "bridge" {
		if c.CaptureInterface != "" {
			bad("applies to mode bridge only", "capture_interface")
		}
		for i, r := range c.Resources {
			if len(r.Portals) > 0 {
				bad("portals apply to mode bridge only", "resources", i, "portals")
			}
			if r.Protocol != "" {
				bad("protocol applies to mode bridge only: target mode's discovery knows it", "resources", i, "protocol")
			}
		}
		return
	}
	if c.CaptureInterface == "" || len(c.CaptureInterface) > 15 || strings.ContainsAny(c.CaptureInterface, "/ \t") {
		p.by("mode").bad("mode bridge needs the interface towards the target (e.g. the bridge port), ≤ 15 characters", "capture_interface")
	}
	seen := map[netip.AddrPort]string{}
	for i, r := range c.Resources {
		if len(r.Portals) == 0 {
			p.by("mode").bad("mode bridge names a resource by its target's portals (address:port)", "resources", i, "portals")
		}
		if !(len(r.Devices) == 1 && r.Devices[0] == "auto") {
			bad("mode bridge has no block devices: its read wait is measured on the wire", "resources", i, "devices")
		}
		if r.ThresholdAuto { // its value in the tree is AutoStart now: not echoed
			p.badBare("auto learns from the devices' diskstats, which mode bridge has none of: set a duration", "resources", i, "threshold")
		}
		if r.Protocol != "" && !slices.Contains(Protocols, r.Protocol) {
			bad("want "+strings.Join(Protocols, "|"), "resources", i, "protocol")
		}
		for k, p := range r.Portals {
			ap, err := netip.ParseAddrPort(p)
			if err != nil {
				a, aerr := netip.ParseAddr(p)
				if aerr != nil {
					bad("want address:port or address", "resources", i, "portals", k)
					continue
				}
				ap = netip.AddrPortFrom(a, c.PortalPort(r))
			}
			if ap.Port() == 0 {
				bad("want a port other than 0", "resources", i, "portals", k)
			}
			ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			if other, dup := seen[ap]; dup {
				bad(fmt.Sprintf("portal %s is already resource %s's", ap, other), "resources", i, "portals", k)
			}
			seen[ap] = r.Name
		}
	}
}

// PortalPort is the port of r's portals that name none: nvmetcp.Port for
// protocol nvme-tcp, else iscsi_port.
func (c *Config) PortalPort(r Resource) uint16 {
	if r.Protocol == "nvme-tcp" {
		return nvmetcp.Port
	}
	return uint16(c.ISCSIPort)
}

// validatePolicy checks resource i's weights and classes against its
// policy: settings for another policy are a mistake, not something to ignore.
func (c *Config) validatePolicy(p *problems, i int) {
	bad := p.bad
	r := &c.Resources[i]
	if len(r.Weights) > 0 && r.Policy != "weighted" {
		bad("weights apply to policy weighted only", "resources", i, "weights")
	}
	for _, a := range slices.Sorted(maps.Keys(r.Weights)) {
		if _, err := netip.ParseAddr(a); err != nil {
			p.badBare("not an IP address", "resources", i, "weights", a)
		}
		if w := r.Weights[a]; !(w > 0) || w > 1e6 {
			bad("want a weight > 0 (≤ 1e6)", "resources", i, "weights", a)
		}
	}
	for _, a := range slices.Sorted(maps.Keys(r.ConsumerDevices)) {
		if _, err := netip.ParseAddr(a); err != nil {
			p.badBare("not an IP address", "resources", i, "consumer_devices", a)
		}
		devs := r.ConsumerDevices[a]
		if len(devs) == 0 {
			bad("want at least one device", "resources", i, "consumer_devices", a)
		}
		explicit := !(len(r.Devices) == 1 && r.Devices[0] == "auto")
		for k, d := range devs {
			switch {
			case d == "" || strings.ContainsAny(d, "/ \t"):
				bad("want a diskstats device name (e.g. loop3, sdb)", "resources", i, "consumer_devices", a, k)
			case explicit && !slices.Contains(r.Devices, d):
				bad("not one of the resource's devices ("+strings.Join(r.Devices, ", ")+")", "resources", i, "consumer_devices", a, k)
			}
		}
	}
	c.validateClasses(p, i)
}

// validateClasses checks resource i's classes: only under policy
// slo-classes, which needs one; distinct names, each member in one class.
func (c *Config) validateClasses(p *problems, i int) {
	bad := p.bad
	r := &c.Resources[i]
	if len(r.Classes) > 0 && r.Policy != "slo-classes" {
		bad("classes apply to policy slo-classes only", "resources", i, "classes")
	}
	if r.Policy == "slo-classes" && len(r.Classes) == 0 {
		bad("policy slo-classes needs at least one class", "resources", i, "policy")
	}
	names, members := map[string]int{}, map[netip.Addr]string{}
	for k := range r.Classes {
		cl := &r.Classes[k]
		if cl.Name == "" || len(cl.Name) > 64 || strings.ContainsAny(cl.Name, " \t\n/\"") {
			bad("want a non-empty name without spaces, quotes or slashes (≤ 64)", "resources", i, "classes", k, "name")
		} else if line, dup := names[cl.Name]; dup {
			bad(fmt.Sprintf("the name of the class on line %d already", line), "resources", i, "classes", k, "name")
		} else {
			names[cl.Name] = lineOf(p.root, "resources", i, "classes", k, "name")
		}
		if len(cl.Members) == 0 {
			bad("want at least one member address", "resources", i, "classes", k, "members")
		}
		for m, s := range cl.Members {
			a, err := netip.ParseAddr(s)
			if err != nil {
				bad("not an IP address", "resources", i, "classes", k, "members", m)
				continue
			}
			if other, dup := members[a.Unmap()]; dup {
				bad("already in class "+other, "resources", i, "classes", k, "members", m)
			}
			members[a.Unmap()] = cl.Name
		}
		if cl.IOPS < 0 || cl.IOPS > 1e9 {
			bad("want 0 (none) .. 1e9", "resources", i, "classes", k, "iops")
		}
		if cl.MBs < 0 || cl.MBs > 1e6 {
			bad("want 0 (none) .. 1e6", "resources", i, "classes", k, "mb_s")
		}
		if cl.Latency < 0 || cl.Latency > 10*time.Second {
			bad("want 0 (none) .. 10s", "resources", i, "classes", k, "latency")
		}
		if cl.Burst < 0 || cl.Burst > time.Hour {
			bad("want 0 .. 1h", "resources", i, "classes", k, "burst")
		}
		if cl.Burst > 0 && cl.IOPS == 0 && cl.MBs == 0 {
			bad("a burst allowance needs an iops or mb_s objective to bank", "resources", i, "classes", k, "burst")
		}
	}
}
