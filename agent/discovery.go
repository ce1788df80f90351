package agent

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/discover"
)

// SnapshotDiscoverer turns discover's view of the target into the agent's
// topology, naming discovered resources after the config's.
type SnapshotDiscoverer struct {
	Snap      func() (discover.Snapshot, error)
	Resources []config.Resource
	// Ports are the TCP ports the agent throttles and samples
	// (iscsi_port): the target's other ports are Topology.Unthrottled.
	Ports []uint16
}

// Discover maps each configured resource to what the target shows:
//   - devices listed in the config are used as given;
//   - devices: [auto] takes the discovered resource (a pool of LUNs on
//     the same lowest devices) whose targets' IQNs end in ":NAME" or
//     ".NAME"-like suffixes containing the resource name, or, when the
//     config has one auto resource and the target one pool, that pool.
//
// A resource that maps to nothing (a typo'd name, a pool another
// resource claimed) is left out of Resources and named in Unmapped with
// the reason: the others are still mapped, and since discovery reruns,
// it is retried at every round. Only a failure to read the target fails
// the whole round.
//
// Consumers are the initiator addresses with sessions on the resource's
// targets; their devices are the resource's LUN devices they can reach,
// narrowed to the resource's consumer_devices where it lists them.
func (d SnapshotDiscoverer) Discover() (*Topology, error) {
	snap, err := d.Snap()
	if err != nil {
		return nil, err
	}
	t := &Topology{Resources: map[string]ResourceView{}, Sources: snap.Sources}
	for _, p := range snap.Ports {
		if !slices.Contains(d.Ports, p) {
			t.Unthrottled = append(t.Unthrottled, p)
		}
	}
	autos := 0
	for _, r := range d.Resources {
		if isAuto(r) {
			autos++
		}
	}
	claimed := map[string]string{} // pool → the resource that took it
	for _, r := range d.Resources {
		devices := r.Devices
		if isAuto(r) {
			dr, why := pickPool(snap, r.Name, autos, claimed)
			if dr == nil {
				t.unmap(r.Name, why)
				continue
			}
			claimed[dr.Name] = r.Name
			devices = dr.Devices
		}
		t.Resources[r.Name] = view(snap, r, devices)
	}
	return t, nil
}

func isAuto(r config.Resource) bool { return len(r.Devices) == 1 && r.Devices[0] == "auto" }

// pickPool is the discovered pool resource name maps to (autos: how many
// resources the config discovers), or nil and why there is none.
func pickPool(snap discover.Snapshot, name string, autos int, claimed map[string]string) (*discover.Resource, string) {
	dr := matchResource(snap, name)
	if dr == nil && autos == 1 && len(snap.Resources) == 1 {
		dr = &snap.Resources[0]
	}
	if dr == nil {
		return nil, fmt.Sprintf("no discovered pool matches (found %s; a pool matches when one of its targets' names ends in :%s or .%s); name its devices in the config", names(snap), name, name)
	}
	if other, ok := claimed[dr.Name]; ok {
		return nil, fmt.Sprintf("pool %s is already resource %s's", dr.Name, other)
	}
	if len(dr.Devices) == 0 {
		return nil, fmt.Sprintf("pool %s has no block device to measure (its LUNs are plain files); name its devices in the config", dr.Name)
	}
	return dr, ""
}

// view is resource r on devices: the consumers that reach them.
func view(snap discover.Snapshot, r config.Resource, devices []string) ResourceView {
	v := ResourceView{Devices: devices, Consumers: map[netip.Addr][]string{}}
	narrow := consumerDevices(r)
	for _, c := range snap.Consumers {
		var devs []string
		only, narrowed := narrow[c.Addr]
		for _, l := range c.LUNs {
			if slices.Contains(devices, l.Device) && (!narrowed || slices.Contains(only, l.Device)) {
				devs = append(devs, l.Device)
			}
		}
		if len(devs) > 0 {
			v.Consumers[c.Addr] = devs
		}
	}
	return v
}

func matchResource(s discover.Snapshot, name string) *discover.Resource {
	for i := range s.Resources {
		for _, l := range s.Resources[i].LUNs {
			if strings.HasSuffix(l.Target, ":"+name) || strings.HasSuffix(l.Target, "."+name) {
				return &s.Resources[i]
			}
		}
	}
	return nil
}

func names(s discover.Snapshot) string {
	var n []string
	for _, r := range s.Resources {
		n = append(n, r.Name)
	}
	if len(n) == 0 {
		return "none"
	}
	return strings.Join(n, ", ")
}

// consumerDevices is a resource's consumer_devices by address (config
// validation guarantees the addresses).
func consumerDevices(r config.Resource) map[netip.Addr][]string {
	out := map[netip.Addr][]string{}
	for s, devs := range r.ConsumerDevices {
		if a, err := netip.ParseAddr(s); err == nil {
			out[a.Unmap()] = devs
		}
	}
	return out
}

// logMappingChanges logs what changed from prev (nil: none yet) to next
// in how the config's resources map: a resource that became unmapped (or
// whose reason changed) as a warning, one mapped or moved to other
// devices as info. A round that changes nothing logs nothing, so an
// unmapped resource is said once, not every discovery round.
func logMappingChanges(log *slog.Logger, prev, next *Topology) {
	if prev == nil {
		prev = &Topology{}
	}
	if !slices.Equal(prev.Sources, next.Sources) && len(next.Sources) > 0 {
		log.Info("discovery reads the target software found", "sources", strings.Join(next.Sources, ","))
	}
	if !slices.Equal(prev.Unthrottled, next.Unthrottled) && len(next.Unthrottled) > 0 {
		log.Warn("the target exports on TCP ports the agent does not throttle: their hosts are discovered and counted as consumers, but their traffic is neither delayed nor measured", "ports", next.Unthrottled)
	}
	for _, name := range slices.Sorted(maps.Keys(next.Unmapped)) {
		if why := next.Unmapped[name]; prev.Unmapped[name] != why {
			log.Warn("resource unmapped: it controls nothing until discovery maps it", "resource", name, "reason", why)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(next.Resources)) {
		v, was := next.Resources[name], prev.Resources[name]
		_, wasUnmapped := prev.Unmapped[name]
		if _, ok := prev.Resources[name]; !ok || wasUnmapped || !slices.Equal(v.Devices, was.Devices) {
			log.Info("resource mapped", "resource", name, "devices", strings.Join(v.Devices, ","))
		}
	}
}
