package agent

import (
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/sanqos/sanqos/sample"
)

// plan is a resource's view and policy compiled for the per-tick loop:
// device indexes instead of name lookups, consumers already sorted by
// address string (as status lists them), their strings made once. It is
// rebuilt only when discovery publishes a new topology or a reload new
// specs, so a tick at 1,000 resources × 10,000 consumers does no sorting
// and few map lookups.
type plan struct {
	topo *Topology
	// reload and threshold are the generation's specs count and the
	// resource's threshold it was compiled under (prepare).
	reload    uint64
	threshold time.Duration
	devices   []string
	measured  []int // devices whose read wait is the indicator
	// users are the consumers (indexes) of each device.
	users     [][]int
	consumers []planConsumer
	// loads and rates are each consumer's smoothed load and write rate,
	// flat by consumer index (the tick walks them in order), carried
	// over by address from the plan before.
	loads  []loadEstimate
	rates  []Smoother
	static []planConsumer // static throttleable consumers without devices in the view
	// index is each consumer's index (consumers, then static: a tick's
	// PolicyInput.Consumers), made on first use; flags a buffer of
	// marks.
	index map[netip.Addr]int
	flags []bool
}

// marks flags each consumer of p (index as PolicyInput.Consumers) that
// is a key of set: O(len(set)) lookups, where asking set of every
// consumer was a map lookup each, 10,000 a tick at scale. The slice is
// p's, valid until the next call.
func marks[V any](p *plan, set map[netip.Addr]V) []bool {
	p.flags = grow(p.flags, len(p.consumers)+len(p.static))
	clear(p.flags)
	if len(set) == 0 {
		return p.flags
	}
	for a := range set {
		if k, ok := p.indexOf(a); ok {
			p.flags[k] = true
		}
	}
	return p.flags
}

// indexOf is a's index in a tick's PolicyInput.Consumers (none in a nil
// plan).
func (p *plan) indexOf(a netip.Addr) (int, bool) {
	if p == nil {
		return 0, false
	}
	if p.index == nil {
		p.index = make(map[netip.Addr]int, len(p.consumers)+len(p.static))
		for k, pc := range p.consumers {
			p.index[pc.addr] = k
		}
		for k, pc := range p.static {
			p.index[pc.addr] = len(p.consumers) + k
		}
	}
	k, ok := p.index[a]
	return k, ok
}

// addr is the address of consumer k (PolicyInput.Consumers' index).
func (p *plan) addr(k int) netip.Addr {
	if k < len(p.consumers) {
		return p.consumers[k].addr
	}
	return p.static[k-len(p.consumers)].addr
}

// matches reports whether the plan was compiled from a view equal to v.
func (p *plan) matches(v ResourceView) bool {
	if !slices.Equal(p.devices, v.Devices) || len(p.consumers) != len(v.Consumers) {
		return false
	}
	for _, pc := range p.consumers {
		devs, ok := v.Consumers[pc.addr]
		if !ok || !slices.Equal(devs, pc.devNames) {
			return false
		}
	}
	return true
}

type planConsumer struct {
	addr      netip.Addr
	name      string
	devNames  []string
	devs      []int
	important bool
	static    bool // in spec.Throttleable
	// exclusive: no other consumer uses any of its devices, so their
	// queue and load are its own. With a LUN shared by several
	// initiators (one tgt target for all of them, a VMware datastore)
	// they are everyone's, and only the wire can tell consumers apart.
	exclusive bool
}

func (l *Loops) compile(rs *resourceState, spec ResourceSpec, view ResourceView, g *generation) {
	old := rs.plan
	p := &plan{topo: g.topo, reload: g.reload, threshold: spec.Threshold, devices: view.Devices}
	idx := make(map[string]int, len(view.Devices))
	for i, d := range view.Devices {
		if _, dup := idx[d]; !dup {
			idx[d] = i
		}
	}
	for _, d := range spec.measuredDevices(view) {
		if i, ok := idx[d]; ok {
			p.measured = append(p.measured, i)
		}
	}
	// measuredDevices may come from map order; a fixed summing order keeps
	// the indicator bit-for-bit reproducible (the simulator relies on it).
	slices.Sort(p.measured)
	for c, devs := range view.Consumers {
		pc := planConsumer{addr: c, name: c.String(), devNames: devs, important: spec.Important[c], static: spec.Throttleable[c]}
		for _, d := range devs {
			if i, ok := idx[d]; ok {
				pc.devs = append(pc.devs, i)
			} else {
				pc.devs = append(pc.devs, -1) // a device outside the resource: no rate from it
			}
		}
		p.consumers = append(p.consumers, pc)
	}
	sort.Slice(p.consumers, func(i, k int) bool { return p.consumers[i].name < p.consumers[k].name })
	// A consumer that left takes its history with it.
	p.loads, p.rates = make([]loadEstimate, len(p.consumers)), make([]Smoother, len(p.consumers))
	for k, pc := range p.consumers {
		if j, ok := old.indexOf(pc.addr); ok && j < len(old.consumers) {
			p.loads[k], p.rates[k] = old.loads[j], old.rates[j]
		} else {
			p.rates[k] = l.cfg.NewRateSmoother()
		}
	}
	p.users = make([][]int, len(p.devices))
	for k, pc := range p.consumers {
		for _, i := range pc.devs {
			if i >= 0 {
				p.users[i] = append(p.users[i], k)
			}
		}
	}
	for k := range p.consumers {
		pc := &p.consumers[k]
		pc.exclusive = true
		for _, i := range pc.devs {
			if i >= 0 && len(p.users[i]) > 1 {
				pc.exclusive = false
			}
		}
	}
	for c := range spec.Throttleable {
		if _, seen := view.Consumers[c]; !seen && !spec.Important[c] {
			p.static = append(p.static, planConsumer{addr: c, name: c.String()})
		}
	}
	// Carry the last counters over to the new plan by device name, so a
	// rediscovered topology costs no interval.
	prev := make([]sample.Counters, len(p.devices))
	if old != nil {
		for i, d := range old.devices {
			if k, ok := idx[d]; ok {
				prev[k] = rs.prev[i]
			}
		}
	}
	rs.plan, rs.prev = p, prev
}

// measuredDevices are the devices whose read wait the indicator may
// measure: all of them, or the important consumers' (important-sets).
func (s ResourceSpec) measuredDevices(v ResourceView) []string {
	if !s.ProtectImportantOnly && (s.NewPolicy == nil || s.NewPolicy().Indicator() != IndicatorImportant) {
		return v.Devices
	}
	var devs []string
	for c, ds := range v.Consumers {
		if s.Important[c] {
			devs = append(devs, ds...)
		}
	}
	return devs
}
