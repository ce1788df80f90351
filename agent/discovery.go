package agent

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/discover"
)

// SnapshotDiscoverer turns discover's view of the target into the agent's
// topology, naming discovered resources after the config's.
type SnapshotDiscoverer struct {
	Snap      func() (discover.Snapshot, error)
	Resources []config.Resource
}

// Discover maps each configured resource to what the target shows:
//   - devices listed in the config are used as given;
//   - devices: [auto] takes the discovered resource (a pool of LUNs on
//     the same lowest devices) whose targets' IQNs end in ":NAME" or
//     ".NAME"-like suffixes containing the resource name, or, when the
//     config has one auto resource and the target one pool, that pool.
//
// Consumers are the initiator addresses with sessions on the resource's
// targets; their devices are the resource's LUN devices they can reach,
// narrowed to the resource's consumer_devices where it lists them.
func (d SnapshotDiscoverer) Discover() (*Topology, error) {
	snap, err := d.Snap()
	if err != nil {
		return nil, err
	}
	t := &Topology{Resources: map[string]ResourceView{}}
	var autos []config.Resource
	for _, r := range d.Resources {
		if len(r.Devices) == 1 && r.Devices[0] == "auto" {
			autos = append(autos, r)
		}
	}
	used := map[string]bool{}
	for _, r := range d.Resources {
		var dr *discover.Resource
		if len(r.Devices) == 1 && r.Devices[0] == "auto" {
			dr = matchResource(snap, r.Name)
			if dr == nil && len(autos) == 1 && len(snap.Resources) == 1 {
				dr = &snap.Resources[0]
			}
			if dr == nil {
				return nil, fmt.Errorf("resource %s: no discovered pool matches (found %s); name its devices in the config", r.Name, names(snap))
			}
			if used[dr.Name] {
				return nil, fmt.Errorf("resource %s: pool %s already claimed by another resource", r.Name, dr.Name)
			}
			used[dr.Name] = true
		}
		v := ResourceView{Consumers: map[netip.Addr][]string{}}
		devset := map[string]bool{}
		if dr != nil {
			v.Devices = dr.Devices
		} else {
			v.Devices = r.Devices
		}
		for _, dev := range v.Devices {
			devset[dev] = true
		}
		narrow := consumerDevices(r)
		for _, c := range snap.Consumers {
			var devs []string
			only, narrowed := narrow[c.Addr]
			for _, l := range c.LUNs {
				if devset[l.Device] && (!narrowed || only[l.Device]) {
					devs = append(devs, l.Device)
				}
			}
			if len(devs) > 0 {
				v.Consumers[c.Addr] = devs
			}
		}
		t.Resources[r.Name] = v
	}
	return t, nil
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
func consumerDevices(r config.Resource) map[netip.Addr]map[string]bool {
	out := map[netip.Addr]map[string]bool{}
	for s, devs := range r.ConsumerDevices {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		m := map[string]bool{}
		for _, d := range devs {
			m[d] = true
		}
		out[a.Unmap()] = m
	}
	return out
}
