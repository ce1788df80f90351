package doctor

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/discover"
)

// discoveryCheck previews what the agent's discovery would find: the
// resources (pools of LUNs on the same lowest devices), each LUN and the
// device that measures it, the consumers and what they use, and how the
// config's resources map onto that (agent.SnapshotDiscoverer, the
// agent's own mapping). Every source only reads: tgtadm --op show,
// configfs, /proc/net/iet, sysfs.
type discoveryCheck struct{ e *Env }

func (discoveryCheck) Name() string { return "discovery" }

func (c discoveryCheck) Run() Result {
	e := c.e
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
		sources = []string{e.Config.Discovery.Source}
	}
	if len(sources) == 0 {
		return Result{Status: OK, Summary: "no target software found to preview"}
	}
	r := Result{Status: OK}
	var sum []string
	for _, src := range sources {
		s, st, lines := e.preview(src)
		sum = append(sum, s)
		r.Detail = append(r.Detail, lines...)
		if st > r.Status && e.configured() {
			r.Status = st
		}
	}
	r.Summary = strings.Join(sum, "; ")
	return r
}

// preview reads one source and lays out what BuildSnapshot makes of it.
func (e *Env) preview(src string) (string, Status, []string) {
	label, targets, err := e.readSource(src)
	if err != nil {
		return fmt.Sprintf("%s: %v", label, err), Warn, nil
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
	if e.configured() {
		d := agent.SnapshotDiscoverer{Resources: e.Config.Resources, Snap: func() (discover.Snapshot, error) { return snap, nil }}
		topo, err := d.Discover()
		if err != nil {
			// The agent logs this every discovery round and controls
			// nothing meanwhile.
			return sum + "; " + err.Error(), Warn, lines
		}
		lines = append(lines, "  the config's resources (the agent's mapping):")
		lines = append(lines, indent(topologyLines(topo), "  ")...)
	}
	if len(snap.Problems) > 0 {
		sum += fmt.Sprintf(", %d problems", len(snap.Problems))
	}
	return sum, st, lines
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
		args := []string{"--lld", "iscsi", "--op", "show", "--mode", "target"}
		if port != 0 {
			args = append([]string{"-C", strconv.Itoa(port)}, args...)
		}
		label := "tgt (tgtadm " + strings.Join(args, " ") + ")"
		out, err := e.Host.Exec("tgtadm", args...)
		if err != nil {
			return label, nil, fmt.Errorf("tgtadm: %w", err)
		}
		t, err := discover.ParseTgtadm(out)
		return label, t, err
	case "lio":
		t, err := discover.ReadLIO(e.lioRoot())
		return "lio (" + e.lioRoot() + ")", t, err
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
