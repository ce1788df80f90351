package config

import (
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sanqos/sanqos/throttle"
)

// MaxResources and MaxConsumers bound a config.
const (
	MaxResources = 10000
	MaxConsumers = 100000
)

// validate checks the config as a whole, after applyDefaults, and returns
// every problem, in line order. It changes nothing in the config but its
// Warnings.
func (c *Config) validate(root *yaml.Node) []Error {
	p := &problems{root: root, c: c}
	c.validateAgent(p)
	c.validateControl(p)
	c.validateResources(p)
	for _, w := range sorted(p.warns) {
		c.Warnings = append(c.Warnings, w.Error())
	}
	return sorted(p.errs)
}

// validateAgent checks the agent's own settings: its tick, backend, mode,
// listeners and discovery, and the default objective.
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
		bad("want "+strings.Join(Objectives, "|"), "objective")
	}
	if c.ISCSIPort < 1 || c.ISCSIPort > 65535 {
		bad("want 1..65535", "iscsi_port")
	}
	c.validatePorts(p)
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
	case "auto", "tgt", "lio", "nvmet", "iet", "static":
	default:
		bad("want auto|tgt|lio|nvmet|iet|static", "discovery", "source")
	}
	if c.Discovery.Interval < 100*time.Millisecond || c.Discovery.Interval > time.Minute {
		bad("want 100ms..1m", "discovery", "interval")
	}
	if c.Discovery.Refresh < c.Discovery.Interval || c.Discovery.Refresh > 10*time.Minute {
		p.by("discovery", "interval").bad("want discovery.interval..10m", "discovery", "refresh")
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
	// Each bound is checked against a valid other key only: an invalid
	// one is reported once, at its own line, and a default (delay_rise's
	// 0 against a negative max_delay) is never reported for a key the
	// file leaves out.
	stepOK := c.DelayStep >= 100*time.Microsecond && c.DelayStep <= 10*time.Millisecond
	if !stepOK {
		bad("want 100us..10ms", "delay_step")
	}
	maxOK := c.MaxDelay > 0 && c.MaxDelay < 100*time.Millisecond
	if !maxOK || stepOK && c.MaxDelay < c.DelayStep {
		bad("want delay_step..<100ms (TCP's minimum RTO is 200 ms)", "max_delay")
	}
	if c.DelayRise < 0 || maxOK && c.DelayRise > c.MaxDelay {
		bad("want 0 (no bound)..max_delay; below 2ms to avoid tail-loss probes", "delay_rise")
	}
	if c.DelayRamp != 0 {
		bad("was removed: delay_follow replaced it (leave delay_ramp out)", "delay_ramp")
	}
	if c.IdleHold < 0 || c.IdleHold > time.Hour {
		bad("want 0 (release with the policy)..1h", "idle_hold")
	}
	switch {
	case c.RateLeverSteps < 0 || c.RateLeverSteps > 200:
		bad("want 0 (the delay alone)..200 steps of write-rate caps past max_delay", "rate_lever_steps")
	case c.RateLeverSteps > 0 && !writeCaps(c.Backend):
		bad(fmt.Sprintf("needs a backend that delays and caps write rates (%s), not %s",
			strings.Join(throttle.NamesWith(func(c throttle.Caps) bool { return c.Delay && c.WriteRate }), ", "), c.Backend), "rate_lever_steps")
	case c.RateLeverSteps > 0:
		p.warn(p.at("write caps queue a capped writer's segments on the target's ingress, and its TCP, which had seen its data acknowledged at once, sends spurious tail-loss probes (lab, 12 iSCSI writers at 10 ms: 250-350 DSACKed probes in six load steps, 0 RTO); see README", nil, "rate_lever_steps"))
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
		bad(thresholdWant("e.g. 15ms"), "threshold")
	}
}

// thresholdWant says what a threshold outside thresholdOK should be:
// the read wait important I/O is held under, so 0 would throttle every
// throttleable consumer all the time, and more than 10 s is no response
// time anyone waits for.
func thresholdWant(hint string) string {
	return "want more than 0 and at most 10s (the response time important reads are held under; " + hint + ")"
}

// writeCaps reports whether backend delays and caps write rates (auto
// never chooses one that caps).
func writeCaps(backend string) bool {
	e, ok := throttle.Lookup(backend)
	return ok && e.Caps.Delay && e.Caps.WriteRate
}

// validatePorts checks ports as a whole: each a TCP port, none twice, at
// most 15 (iptables' multiport match, which the netfilter backends use),
// and not beside iscsi_port, which means ports: [N].
func (c *Config) validatePorts(p *problems) {
	switch {
	case lineOf(p.root, "ports") > 0 && lineOf(p.root, "iscsi_port") > 0:
		p.badBare(fmt.Sprintf("set ports or iscsi_port, not both (iscsi_port: %d is ports: [%d])", c.ISCSIPort, c.ISCSIPort), "ports")
	case len(c.Ports) == 0:
		p.badBare("want at least one port", "ports")
	case len(c.Ports) > 15:
		p.badBare(fmt.Sprintf("%d ports: want at most 15 (iptables' multiport match)", len(c.Ports)), "ports")
	}
	if lineOf(p.root, "ports") == 0 {
		return // the default, or iscsi_port's, checked as itself
	}
	for i, port := range c.Ports {
		switch {
		case port < 1 || port > 65535:
			p.bad("want 1..65535", "ports", i)
		case slices.Index(c.Ports, port) < i:
			p.bad("listed twice", "ports", i)
		}
	}
}

// TCPPorts are Ports as the throttle and the samplers take them
// (validated: each fits).
func (c *Config) TCPPorts() []uint16 {
	out := make([]uint16, len(c.Ports))
	for i, p := range c.Ports {
		out[i] = uint16(p)
	}
	return out
}
