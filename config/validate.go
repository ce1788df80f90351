package config

import (
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sanqos/sanqos/throttle"
)

// Error is one problem with a config, at a line.
type Error struct {
	Line  int
	Field string
	Msg   string
}

// Error is "line N: field: msg"; the line or the field is left out when
// unknown or empty (a key unknown at the top level has no field).
func (e Error) Error() string {
	s := e.Msg
	if e.Field != "" {
		s = e.Field + ": " + s
	}
	if e.Line > 0 {
		s = fmt.Sprintf("line %d: %s", e.Line, s)
	}
	return s
}

// MaxResources and MaxConsumers bound a config.
const (
	MaxResources = 10000
	MaxConsumers = 100000
)

// problems collects a config's errors in the order they are found, each
// at its field's line in root.
type problems struct {
	root *yaml.Node
	errs []error
}

// at is msg about the field at path (keys and indices from the top).
func (p *problems) at(msg string, path ...any) Error {
	return Error{Line: lineOf(p.root, path...), Field: fieldName(path...), Msg: msg}
}

func (p *problems) bad(msg string, path ...any) { p.errs = append(p.errs, p.at(msg, path...)) }

// validate checks the config as a whole, after applyDefaults, and returns
// every problem, in the order of the checks. It changes nothing in the
// config but its Warnings.
func (c *Config) validate(root *yaml.Node) []error {
	p := &problems{root: root}
	c.validateAgent(p)
	c.validateControl(p)
	c.validateResources(p)
	return p.errs
}

// validateAgent checks the agent's own settings: its tick, backend, mode,
// listeners and discovery. The default objective is checked here, after
// the mode, so that the errors keep their order.
func (c *Config) validateAgent(p *problems) {
	bad := p.bad
	if c.Interval < 10*time.Millisecond || c.Interval > 10*time.Second {
		bad("want 10ms..10s", "interval")
	}
	// The backends are the throttle registry's, so a backend the agent can
	// build is one its config may name.
	if backends := throttle.Names(); !slices.Contains(backends, c.Backend) {
		bad("want "+strings.Join(backends, "|"), "backend")
	}
	switch c.Mode {
	case "target", "bridge":
	default:
		bad("want target (OUTPUT chain) or bridge (FORWARD chain)", "mode")
	}
	if !slices.Contains(Objectives, c.Objective) {
		bad(fmt.Sprintf("unknown objective %q: want %s", c.Objective, strings.Join(Objectives, "|")), "objective")
	}
	if c.ISCSIPort < 1 || c.ISCSIPort > 65535 {
		bad("want 1..65535", "iscsi_port")
	}
	if !strings.HasPrefix(c.Socket, "/") {
		bad("want an absolute path", "socket")
	}
	if c.HTTP != "" {
		if _, port, err := net.SplitHostPort(c.HTTP); err != nil || port == "" {
			bad("want host:port (e.g. 127.0.0.1:9311), or empty to disable", "http")
		}
	}
	if c.TokenFile != "" && !strings.HasPrefix(c.TokenFile, "/") {
		bad("want an absolute path", "token_file")
	}
	if c.TokenFile != "" && c.HTTP == "" {
		bad("a token opens the control API over HTTP, but http is disabled", "token_file")
	}
	switch c.Discovery.Source {
	case "tgt", "lio", "iet", "static":
	default:
		bad("want tgt|lio|iet|static", "discovery", "source")
	}
	if c.Discovery.Interval < 100*time.Millisecond || c.Discovery.Interval > time.Minute {
		bad("want 100ms..1m", "discovery", "interval")
	}
	if c.Discovery.Refresh < c.Discovery.Interval || c.Discovery.Refresh > 10*time.Minute {
		bad("want discovery.interval..10m", "discovery", "refresh")
	}
}

// validateControl checks the controller's settings: the indicator's
// smoothing, the PID, the delays and the throttleable thresholds.
func (c *Config) validateControl(p *problems) {
	bad := p.bad
	if c.EWMAAlpha <= 0 || c.EWMAAlpha > 1 {
		bad("want 0 < alpha <= 1", "ewma_alpha")
	}
	if c.PID.Kp <= 0 {
		bad("want > 0", "pid", "kp")
	}
	if c.PID.Ti <= 0 {
		bad("want > 0 (integral time)", "pid", "ti")
	}
	if c.PID.Td < 0 {
		bad("want >= 0", "pid", "td")
	}
	if c.DelayStep < 100*time.Microsecond || c.DelayStep > 10*time.Millisecond {
		bad("want 100us..10ms", "delay_step")
	}
	if c.MaxDelay < c.DelayStep || c.MaxDelay >= 100*time.Millisecond {
		bad("want delay_step..<100ms (TCP's minimum RTO is 200 ms)", "max_delay")
	}
	if c.DelayRise < 0 || c.DelayRise > c.MaxDelay {
		bad("want 0 (no bound)..max_delay; below 2ms to avoid tail-loss probes", "delay_rise")
	}
	if c.DelayRamp < 0 || c.DelayRamp > 10 || math.IsNaN(c.DelayRamp) {
		bad("want 0 (new delays at once)..10 ms of delay per ms of traffic", "delay_ramp")
	}
	if c.IdleHold < 0 || c.IdleHold > time.Hour {
		bad("want 0 (release with the policy)..1h", "idle_hold")
	}
	if c.DelayFollow && c.DelayRamp > 0 {
		bad("delay_follow and delay_ramp exclude each other", "delay_follow")
	}
	switch {
	case c.RateLeverSteps < 0 || c.RateLeverSteps > 200:
		bad("want 0 (the delay alone)..200 steps of write-rate caps past max_delay", "rate_lever_steps")
	case c.RateLeverSteps > 0 && !strings.HasSuffix(c.Backend, "+htb") && c.Backend != "dry-run":
		bad(fmt.Sprintf("needs a backend that delays and caps write rates (delayline+htb), not %s", c.Backend), "rate_lever_steps")
	case c.RateLeverSteps > 0:
		c.Warnings = append(c.Warnings, p.at("write caps queue a capped writer's segments on the target's ingress, and its TCP, which had seen its data acknowledged at once, sends spurious tail-loss probes (lab, 12 iSCSI writers at 10 ms: 250-350 DSACKed probes in six load steps, 0 RTO); see README", "rate_lever_steps").Error())
	}
	switch c.WriteDelayOn {
	case "replies", "acks":
	default:
		bad("want replies (default) or acks", "write_delay_on")
	}
	if c.ThrottleableQueue < 0 || c.ThrottleableQueue > 1024 || math.IsNaN(c.ThrottleableQueue) {
		bad("want 0 (off) or a queue of up to 1024 requests, e.g. 1.5", "throttleable_queue")
	}
	if c.ReadMBs < 0 || math.IsNaN(c.ReadMBs) {
		bad("want >= 0 (0: off)", "throttleable_read_mb_s")
	}
	if c.WriteMBs < 0 {
		bad("want >= 0", "throttleable_write_mb_s")
	}
	if !thresholdOK(c.Threshold) {
		bad(thresholdWant(c.Threshold, "e.g. 15ms"), "threshold")
	}
}

// thresholdWant says what a threshold d outside thresholdOK should be:
// the read wait important I/O is held under, so 0 would throttle every
// throttleable consumer all the time, and more than 10 s is no response
// time anyone waits for.
func thresholdWant(d time.Duration, hint string) string {
	return fmt.Sprintf("%v: want more than 0 and at most 10s (the response time important reads are held under; %s)", d, hint)
}

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
		c.Warnings = append(c.Warnings, err.Error())
	}
	if len(c.Resources) > MaxResources {
		p.bad(fmt.Sprintf("%d resources, limit %d", len(c.Resources), MaxResources), "resources")
	}
	names := map[string]bool{}
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
				p.bad("static discovery needs explicit devices", "resources", i, "devices")
			}
		}
	}
}

// validateResource checks resource i, its name against the names before
// it, and returns how many static consumers it lists.
func (c *Config) validateResource(p *problems, i int, names map[string]bool) (consumers int) {
	bad := p.bad
	r := &c.Resources[i]
	if r.Name == "" || len(r.Name) > 64 || strings.ContainsAny(r.Name, " \t\n/\"") {
		bad("want a non-empty name without spaces, quotes or slashes (≤ 64)", "resources", i, "name")
	} else if names[r.Name] {
		bad("duplicate resource name "+r.Name, "resources", i, "name")
	}
	names[r.Name] = true
	// 0: set to 0, or the top-level one was invalid (and reported).
	if !thresholdOK(r.Threshold) && (r.Threshold != 0 || inFile(p.root, "resources", i, "threshold")) {
		bad(thresholdWant(r.Threshold, "leave it out for the top-level threshold"), "resources", i, "threshold")
	}
	for k, d := range r.Devices {
		if d == "" || strings.ContainsAny(d, "/ \t") && d != "auto" {
			bad("want a diskstats device name (e.g. loop3, sdb) or auto", "resources", i, "devices", k)
		}
	}
	if !slices.Contains(Objectives, r.Objective) {
		bad(fmt.Sprintf("unknown objective %q: want %s", r.Objective, strings.Join(Objectives, "|")), "resources", i, "objective")
	}
	if !slices.Contains(Policies, r.Policy) {
		bad(fmt.Sprintf("unknown policy %q: want %s", r.Policy, strings.Join(Policies, "|")), "resources", i, "policy")
	}
	c.validatePolicy(p, i)
	c.validateReservations(p, i)
	for _, list := range []struct {
		key string
		v   []string
	}{{"important", r.Important}, {"throttleable", r.Throttleable}} {
		for k, a := range list.v {
			if _, err := netip.ParseAddr(a); err != nil {
				bad(fmt.Sprintf("%q is not an IP address", a), "resources", i, list.key, k)
			}
		}
		consumers += len(list.v)
	}
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
		}
		return
	}
	if c.CaptureInterface == "" || len(c.CaptureInterface) > 15 || strings.ContainsAny(c.CaptureInterface, "/ \t") {
		bad("mode bridge needs the interface towards the target (e.g. the bridge port), ≤ 15 characters", "capture_interface")
	}
	seen := map[netip.AddrPort]string{}
	for i, r := range c.Resources {
		if len(r.Portals) == 0 {
			bad("mode bridge names a resource by its target's portals (address:port)", "resources", i, "portals")
		}
		if !(len(r.Devices) == 1 && r.Devices[0] == "auto") {
			bad("mode bridge has no block devices: its read wait is measured on the wire", "resources", i, "devices")
		}
		if r.ThresholdAuto {
			bad("auto learns from the devices' diskstats, which mode bridge has none of: set a duration", "resources", i, "threshold")
		}
		for k, p := range r.Portals {
			ap, err := netip.ParseAddrPort(p)
			if err != nil {
				a, aerr := netip.ParseAddr(p)
				if aerr != nil {
					bad(fmt.Sprintf("%q: want address:port or address", p), "resources", i, "portals", k)
					continue
				}
				ap = netip.AddrPortFrom(a, uint16(c.ISCSIPort))
			}
			if ap.Port() == 0 {
				bad("port 0", "resources", i, "portals", k)
			}
			ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			if other, dup := seen[ap]; dup {
				bad(fmt.Sprintf("portal %s is already resource %s's", ap, other), "resources", i, "portals", k)
			}
			seen[ap] = r.Name
		}
	}
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
			bad(fmt.Sprintf("%q is not an IP address", a), "resources", i, "weights", a)
		}
		if w := r.Weights[a]; !(w > 0) || w > 1e6 {
			bad("want a weight > 0 (≤ 1e6)", "resources", i, "weights", a)
		}
	}
	for _, a := range slices.Sorted(maps.Keys(r.ConsumerDevices)) {
		if _, err := netip.ParseAddr(a); err != nil {
			bad(fmt.Sprintf("%q is not an IP address", a), "resources", i, "consumer_devices", a)
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
				bad(fmt.Sprintf("%s is not one of the resource's devices", d), "resources", i, "consumer_devices", a, k)
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
	names, members := map[string]bool{}, map[netip.Addr]string{}
	for k := range r.Classes {
		cl := &r.Classes[k]
		if cl.Name == "" || len(cl.Name) > 64 || strings.ContainsAny(cl.Name, " \t\n/\"") {
			bad("want a non-empty name without spaces, quotes or slashes (≤ 64)", "resources", i, "classes", k, "name")
		} else if names[cl.Name] {
			bad("duplicate class name "+cl.Name, "resources", i, "classes", k, "name")
		}
		names[cl.Name] = true
		if len(cl.Members) == 0 {
			bad("want at least one member address", "resources", i, "classes", k, "members")
		}
		for m, s := range cl.Members {
			a, err := netip.ParseAddr(s)
			if err != nil {
				bad(fmt.Sprintf("%q is not an IP address", s), "resources", i, "classes", k, "members", m)
				continue
			}
			if other, dup := members[a.Unmap()]; dup {
				bad(fmt.Sprintf("%s is already in class %s", s, other), "resources", i, "classes", k, "members", m)
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

func fieldName(path ...any) string {
	var b strings.Builder
	for _, p := range path {
		switch v := p.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(v)
		case int:
			fmt.Fprintf(&b, "[%d]", v)
		}
	}
	return b.String()
}

// lineOf finds the line of a field in the YAML tree: that of the nearest
// enclosing field if it is not there (0 if none is: the value came from
// the defaults).
func lineOf(root *yaml.Node, path ...any) int {
	line, _ := lookup(root, path...)
	return line
}

// inFile says whether the file sets the field at path (to anything,
// null included).
func inFile(root *yaml.Node, path ...any) bool {
	_, ok := lookup(root, path...)
	return ok
}

// lookup is lineOf and inFile.
func lookup(root *yaml.Node, path ...any) (line int, found bool) {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, p := range path {
		switch v := p.(type) {
		case string:
			if n.Kind != yaml.MappingNode {
				return line, false
			}
			hit := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == v {
					line = n.Content[i].Line
					n = n.Content[i+1]
					hit = true
					break
				}
			}
			if !hit {
				return line, false
			}
		case int:
			if n.Kind != yaml.SequenceNode || v >= len(n.Content) {
				return line, false
			}
			n = n.Content[v]
			line = n.Line
		}
	}
	return line, true
}
