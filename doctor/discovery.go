package doctor

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/discover"
)

// discoveryCheck previews what the agent's discovery would find: the
// resources (pools of LUNs on the same lowest devices), each LUN and the
// device that measures it, the consumers and what they use, and how the
// config's resources map onto that (agent.SnapshotDiscoverer, the
// agent's own mapping, on every source it would read merged). Every
// source only reads: tgtadm --op show, configfs, /proc/net/iet, sysfs.
//
// With a config it fails when the agent would protect less than the
// config says: a source it would read cannot be read (every round would
// fail), the target exports on a TCP port the agent does not throttle
// (its hosts go undelayed), a resource maps to nothing, or an important
// address is none of its resource's consumers (no session from it: a
// typo, or the initiator is not logged in), since each leaves the agent
// running while it protects nothing there.
func (e *Env) discoveryCheck() Result {
	if e.configured() && e.Config.Mode == "bridge" {
		r := Result{Status: OK, Summary: fmt.Sprintf("bridge mode: %d resources by portal; consumers are whoever talks to them", len(e.Config.Resources))}
		for _, res := range e.Config.Resources {
			r.Detail = append(r.Detail, fmt.Sprintf("resource %s: portals %s", res.Name, strings.Join(res.Portals, " ")))
		}
		return r
	}
	if e.configured() && e.Config.Discovery.Source == "static" {
		topo, _ := agent.StaticDiscoverer(e.Config).Discover()
		r := Result{Status: OK, Summary: fmt.Sprintf("static: %d resources from the config", len(topo.Resources))}
		r.Detail = topologyLines(topo)
		return r
	}
	sources := e.found()
	if e.configured() {
		sources = e.configuredSources()
	}
	if len(sources) == 0 {
		if e.configured() && len(e.Config.Resources) > 0 {
			return Result{Status: Fail, Summary: "discovery auto: no target software found, so no resource maps to anything (" + e.autoAbsent() + ")",
				Detail: []string{"the agent would start and retry discovery every round, protecting nothing until a target runs"}}
		}
		return Result{Status: OK, Summary: "no target software found to preview"}
	}
	r := Result{Status: OK}
	var sum []string
	var all []discover.Target
	readable := true
	for _, src := range sources {
		s, st, lines, targets, err := e.preview(src)
		sum = append(sum, s)
		r.Detail = append(r.Detail, lines...)
		all = append(all, targets...)
		readable = readable && err == nil
		if st > r.Status && e.configured() {
			r.Status = st
		}
	}
	r.Summary = strings.Join(sum, "; ")
	if e.configured() {
		if !readable && len(e.Config.Resources) > 0 {
			// The agent fails the whole round when a source it reads
			// fails: nothing would be mapped.
			r.Status = Fail
			r.Summary += "; the agent's discovery would fail every round, so no resource maps to anything"
			return r
		}
		e.mapResources(&r, all)
	}
	return r
}

// configuredSources are the sources the configured agent would read:
// the one it names, or what auto finds here.
func (e *Env) configuredSources() []string {
	if e.Config.Discovery.Source == "auto" {
		return e.autoFound()
	}
	return []string{e.Config.Discovery.Source}
}

// mapResources maps the config's resources onto targets (every source's,
// merged, as the agent does), adds the mapping to r, and fails r for
// each TCP port the target exports on that the agent does not throttle,
// each resource that maps to nothing and each important address that is
// none of its resource's consumers.
func (e *Env) mapResources(r *Result, targets []discover.Target) {
	snap := discover.BuildSnapshot(targets, &discover.Resolver{SysRoot: e.Host.path("/sys"), Stat: e.Host.Stat})
	d := agent.SnapshotDiscoverer{Resources: e.Config.Resources, Ports: e.Config.TCPPorts(), Snap: func() (discover.Snapshot, error) { return snap, nil }}
	topo, err := d.Discover()
	if err != nil {
		r.Status, r.Summary = Fail, r.Summary+"; "+err.Error()
		return
	}
	r.Detail = append(r.Detail, "the config's resources (the agent's mapping):")
	r.Detail = append(r.Detail, indent(topologyLines(topo), "  ")...)
	var why []string
	for _, p := range topo.Unthrottled {
		why = append(why, fmt.Sprintf("the target exports on TCP port %d, which the agent does not throttle (ports %v): its hosts count as consumers, but their traffic is neither delayed nor measured", p, e.Config.Ports))
	}
	for _, res := range e.Config.Resources {
		if reason, ok := topo.Unmapped[res.Name]; ok {
			why = append(why, fmt.Sprintf("resource %s maps to nothing: %s", res.Name, reason))
			continue
		}
		v := topo.Resources[res.Name]
		for _, s := range res.Important {
			a, err := netip.ParseAddr(s)
			if _, ok := v.Consumers[a.Unmap()]; err == nil && !ok {
				why = append(why, fmt.Sprintf("important %s of resource %s is none of its consumers (no session from it on the resource's targets: a typo, or the initiator is not logged in; its consumers: %s)", s, res.Name, orNone(addrList(v.Consumers))))
			}
		}
	}
	if len(why) > 0 {
		r.Status = Fail
		r.Summary += "; " + strings.Join(why, "; ")
		r.Detail = append(r.Detail, why...)
	}
}

func addrList(m map[netip.Addr][]string) string {
	var s []string
	for _, a := range slices.SortedFunc(maps.Keys(m), func(a, b netip.Addr) int { return a.Compare(b) }) {
		s = append(s, a.String())
	}
	return strings.Join(s, ", ")
}

// preview reads one source and lays out what BuildSnapshot makes of it;
// it returns the targets read for the mapping across sources.
func (e *Env) preview(src string) (string, Status, []string, []discover.Target, error) {
	label, targets, err := e.readSource(src)
	if err != nil {
		return fmt.Sprintf("%s: %v", label, err), Warn, nil, nil, err
	}
	snap := discover.BuildSnapshot(targets, &discover.Resolver{SysRoot: e.Host.path("/sys"), Stat: e.Host.Stat})
	sessions := 0
	for _, t := range targets {
		sessions += len(t.Sessions)
	}
	sum := fmt.Sprintf("%s: %d targets, %d sessions, %d resources, %d consumers", label, len(targets), sessions, len(snap.Resources), len(snap.Consumers))
	st := OK
	lines := []string{label + ":"}
	for _, res := range snap.Resources {
		lines = append(lines, fmt.Sprintf("  resource %s: pool %s, sampled on %s", res.Name, strings.Join(res.Pool, " "), orNone(strings.Join(res.Devices, " "))))
		for _, l := range res.LUNs {
			lines = append(lines, fmt.Sprintf("    %s LUN %d  %s → %s", l.Target, l.LUN, l.Path, orNone(l.Device)))
		}
	}
	for _, con := range snap.Consumers {
		lines = append(lines, fmt.Sprintf("  consumer %s (%s) uses %s", con.Addr, strings.Join(con.Initiators, ", "), orNone(strings.Join(con.Resources, ", "))))
	}
	for _, p := range snap.Problems {
		st = Warn
		lines = append(lines, "  problem: "+p)
	}
	if len(snap.Problems) > 0 {
		sum += fmt.Sprintf(", %d problems", len(snap.Problems))
	}
	return sum, st, lines, targets, nil
}

// readSource runs the source's reader: the same parsers the agent uses.
func (e *Env) readSource(src string) (string, []discover.Target, error) {
	switch src {
	case "tgt":
		port := e.Config.Discovery.TgtControlPort
		if !e.configured() {
			if ports := e.Host.tgtPorts(); len(ports) > 0 {
				port = ports[0]
			}
		}
		label := "tgt (tgtadm " + strings.Join(discover.TgtadmShow(port, "target"), " ") + ")"
		t, err := discover.ReadTgt(port, func(args ...string) ([]byte, error) {
			out, err := e.Host.Exec("tgtadm", args...)
			if err != nil {
				return nil, fmt.Errorf("tgtadm: %w", err)
			}
			return out, nil
		})
		return label, t, err
	case "lio":
		t, err := discover.ReadLIO(e.lioRoot())
		return "lio (" + e.lioRoot() + ")", t, err
	case "nvmet":
		n, err := discover.ReadNVMet(e.nvmetRoot())
		return "nvmet (" + e.nvmetRoot() + ")", n.Subsystems, err
	case "iet":
		root := e.ietRoot()
		sess, err1 := os.ReadFile(filepath.Join(root, "session"))
		vol, err2 := os.ReadFile(filepath.Join(root, "volume"))
		if err1 != nil || err2 != nil {
			return "iet (" + root + ")", nil, fmt.Errorf("%v %v", err1, err2)
		}
		t, err := discover.ParseIET(sess, vol)
		return "iet (" + root + ")", t, err
	}
	return src, nil, fmt.Errorf("unknown discovery source %q", src)
}

// topologyLines lays out the agent's topology, resources by name.
func topologyLines(t *agent.Topology) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(t.Resources)) {
		v := t.Resources[name]
		out = append(out, fmt.Sprintf("resource %s: devices %s", name, orNone(strings.Join(v.Devices, " "))))
		addrs := slices.SortedFunc(maps.Keys(v.Consumers), func(a, b netip.Addr) int { return a.Compare(b) })
		for _, a := range addrs {
			out = append(out, fmt.Sprintf("  consumer %s on %s", a, orNone(strings.Join(v.Consumers[a], " "))))
		}
		if len(addrs) == 0 {
			out = append(out, "  no consumers (yet)")
		}
	}
	return out
}

func indent(lines []string, by string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = by + l
	}
	return out
}
