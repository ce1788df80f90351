package config

import (
	"fmt"
	"net/netip"
)

// warnListedTwice warns of what resource i lists twice, which the config
// accepts but which does not do what it says: an address twice in
// important or throttleable (a second entry adds nothing, and is most
// likely a mistyped other one), an address in both (important wins: the
// agent never slows an important consumer, so the throttleable entry does
// nothing), and a device twice in devices. Addresses compare as the agent
// compares them: an IPv4-mapped IPv6 address is its IPv4 address.
func (c *Config) warnListedTwice(p *problems, i int) {
	r := &c.Resources[i]
	where := func(path ...any) string {
		return fmt.Sprintf("%s on line %d", fieldName(path[2:]...), lineOf(p.root, path...))
	}
	important := map[netip.Addr][]any{}
	for _, list := range []struct {
		key string
		v   []string
	}{{"important", r.Important}, {"throttleable", r.Throttleable}} {
		seen := map[netip.Addr][]any{}
		for k, s := range list.v {
			a, err := netip.ParseAddr(s)
			if err != nil {
				continue // an error already
			}
			a, path := a.Unmap(), []any{"resources", i, list.key, k}
			switch first, dup := seen[a]; {
			case dup:
				p.warn(p.at("listed twice: also "+where(first...)+"; delete one", nil, path...))
			case list.key == "throttleable" && important[a] != nil:
				p.warn(p.at("also important ("+where(important[a]...)+"): an important consumer is never slowed, so this entry does nothing", nil, path...))
			}
			if _, dup := seen[a]; !dup {
				seen[a] = path
			}
		}
		if list.key == "important" {
			important = seen
		}
	}
	devices := map[string][]any{}
	for k, d := range r.Devices {
		path := []any{"resources", i, "devices", k}
		if first, dup := devices[d]; dup {
			p.warn(p.at("listed twice: also "+where(first...)+"; delete one", nil, path...))
			continue
		}
		devices[d] = path
	}
}
