package agent

import (
	"net/netip"
	"slices"

	"github.com/sanqos/sanqos/config"
)

type staticDiscoverer struct{ t *Topology }

// StaticDiscoverer serves the topology written in the config: each
// resource's devices, and its static consumers (who then have no devices
// of their own, so only the static lists decide who is throttleable),
// except those its consumer_devices names, measured on those devices.
func StaticDiscoverer(cfg *config.Config) Discoverer {
	t := &Topology{Resources: map[string]ResourceView{}}
	for _, r := range cfg.Resources {
		v := ResourceView{Devices: r.Devices, Consumers: map[netip.Addr][]string{}}
		for _, list := range [][]string{r.Important, r.Throttleable} {
			for _, s := range list {
				if a, err := netip.ParseAddr(s); err == nil {
					v.Consumers[a.Unmap()] = nil
				}
			}
		}
		for a, devs := range consumerDevices(r) {
			v.Consumers[a] = slices.Compact(slices.Sorted(slices.Values(devs)))
		}
		t.Resources[r.Name] = v
	}
	return staticDiscoverer{t}
}

func (s staticDiscoverer) Discover() (*Topology, error) { return s.t, nil }
