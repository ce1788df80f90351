// Package config loads and validates the agent's YAML configuration as a
// whole: every error names the field and its line, and a config with any
// error is rejected entirely, so nothing is ever half-applied.
//
// It only parses and checks; it never touches the kernel or the agent.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// PID holds the gains of the thesis' controller (equation 4.2).
type PID struct {
	Kp float64       `yaml:"kp"`
	Ti time.Duration `yaml:"ti"`
	Td time.Duration `yaml:"td"`
}

// Resource is one shared pool sanqos protects.
type Resource struct {
	Name string `yaml:"name"`
	// Devices are the block devices (diskstats names) whose read wait is the
	// resource's indicator; ["auto"] discovers them from the target.
	Devices      []string      `yaml:"devices"`
	Threshold    time.Duration `yaml:"threshold"`
	Important    []string      `yaml:"important"`
	Throttleable []string      `yaml:"throttleable"`
	Policy       string        `yaml:"policy"`
	// Objective says what the threshold bounds: "mean" (the thesis: the
	// smoothed read wait is held at it) or "p95" (the 95th percentile of
	// the per-interval read wait is held at it). Default: the top-level
	// objective.
	Objective string `yaml:"objective"`
	// Weights are the weighted policy's shares per consumer address
	// (default 1 for anyone not listed).
	Weights map[string]float64 `yaml:"weights"`
	// Classes are the slo-classes policy's service classes.
	Classes []Class `yaml:"classes"`
	// ConsumerDevices narrows the devices each consumer (by address) is
	// measured on. A target that gives every initiator every LUN (one tgt
	// target with a LUN per initiator) otherwise makes every consumer's
	// IOPS and waits those of all the resource's devices, and slo-classes
	// could not tell its classes apart. Rates are unaffected (they come
	// from the wire when the agent samples TCP_INFO).
	ConsumerDevices map[string][]string `yaml:"consumer_devices"`
	// Portals name the resource in bridge mode: the target's address:port
	// (port default iscsi_port), since a bridge has no tgtadm to ask.
	Portals []string `yaml:"portals"`
	// Reservations, NetThreshold and CapacityMBs configure the
	// reservations policy (reservations.go).
	Reservations []Reservation `yaml:"reservations"`
	NetThreshold time.Duration `yaml:"net_threshold"`
	CapacityMBs  float64       `yaml:"capacity_mb_s"`
}

// Objectives are what a threshold can bound (see Resource.Objective).
var Objectives = []string{"mean", "p95"}

// Policies are the valid resource policies, in the order help lists them.
var Policies = []string{"read-over-write", "important-sets", "weighted", "slo-classes", "reservations"}

// Class is one service class of the slo-classes policy (seed 004's task,
// knowledge and power users): its members and their objectives. A zero
// objective is none.
type Class struct {
	Name    string   `yaml:"name"`
	Members []string `yaml:"members"`
	// Priority orders who is slowed first when classes must give way:
	// lower first. Default: the order of the list, first highest.
	Priority int `yaml:"priority"`
	// IOPS and MBs are floors the class should attain (reads + writes, the
	// class's members together).
	IOPS float64 `yaml:"iops"`
	MBs  float64 `yaml:"mb_s"`
	// Latency is the ceiling of the members' mean I/O wait.
	Latency time.Duration `yaml:"latency"`
	// Burst is how many seconds of objective a class may bank while below
	// it and spend above it before it counts as exceeding.
	Burst time.Duration `yaml:"burst"`
}

// Config is the agent's whole configuration.
type Config struct {
	Interval  time.Duration `yaml:"interval"`
	Backend   string        `yaml:"backend"`
	Mode      string        `yaml:"mode"`
	ISCSIPort int           `yaml:"iscsi_port"`
	Device    string        `yaml:"device"`
	// CaptureInterface is where bridge mode watches the iSCSI traffic:
	// the bridge port towards the target.
	CaptureInterface string `yaml:"capture_interface"`
	Socket           string `yaml:"socket"`
	HTTP             string `yaml:"http"`
	// TokenFile holds the bearer token that opens the control API on the
	// HTTP listener (root-only file); without it HTTP is read-only.
	TokenFile string `yaml:"token_file"`
	// Token is TokenFile's content, read by Load.
	Token     string        `yaml:"-"`
	Discovery Discovery     `yaml:"discovery"`
	Threshold time.Duration `yaml:"threshold"`
	// Objective is the resources' default objective (mean|p95).
	Objective string        `yaml:"objective"`
	EWMAAlpha float64       `yaml:"ewma_alpha"`
	PID       PID           `yaml:"pid"`
	DelayStep time.Duration `yaml:"delay_step"`
	MaxDelay  time.Duration `yaml:"max_delay"`
	// DelayRise bounds a consumer's delay growth per tick to 2 × its last
	// delay + DelayRise, so throttling never outruns TCP's tail-loss probe
	// timer (2·srtt + 2 ms, rounded up to a jiffy: recent kernels add
	// TCP_TIMEOUT_MIN_US; older kernels add 2 jiffies, 8 ms at HZ=250);
	// keep it below 2 ms. 0 (default) disables the bound: in the lab a bound
	// that removes most probes (1 ms) doubled the 10 ms threshold's p95,
	// and 6 ms removed none (README, "Delay rise limit").
	DelayRise time.Duration `yaml:"delay_rise"`
	// DelayRamp is how fast the delay line lets a connection's delay
	// grow, in ms of delay per ms of its traffic (throttle/ramp.go), so
	// the throttled sender's srtt follows and it sends no spurious
	// tail-loss probe; a new connection takes its consumer's delay from
	// its SYN-ACK on. 0 (default) applies each new delay at once, one FIFO
	// per consumer: in the lab 0.5 removed the probes but let load steps
	// through (p95 1.5–2.2 × the threshold; README, "delay_ramp").
	DelayRamp float64 `yaml:"delay_ramp"`
	// DelayFollow has the delay line cap each packet's delay by a model
	// of its sender's srtt (throttle/follow.go): the fastest rise that
	// sends no spurious tail-loss probe. Excludes delay_ramp. Unset, it
	// is on where a held packet is what a sender's timer waits for:
	// with write_delay_on: acks (and no delay_ramp). With replies the
	// held packets are the target's own, which its TCP does not resend
	// while they are still queued on its host, and the consumers' data
	// is acknowledged on time: nothing needs the ramp, and it would only
	// let each load step through for a few round trips (README,
	// "delay_follow").
	DelayFollow bool `yaml:"delay_follow"`
	// WriteDelayOn says which packets carry a write delay: "replies"
	// (default: the target's R2Ts and status; ACKs of the consumer's data
	// stay on time, so no spurious tail-loss probes) or "acks" (the
	// thesis: its pure ACKs). See throttle.WriteOn.
	WriteDelayOn string `yaml:"write_delay_on"`
	// OnsetFeedForward preloads a resource's controller with the delay
	// that held its threshold last time, on the first sample of a write
	// surge, instead of waiting for the smoothed wait to cross (control
	// package, onset.go). Default true.
	OnsetFeedForward bool `yaml:"onset_feedforward"`
	// RateLeverSteps extends each resource's controller past max_delay
	// with this many steps of write-rate caps on the heaviest writers
	// (agent, lever.go): at the top of the range the capped writers keep
	// 10 % of the rate they had when the delay ran out. 0 (default): the
	// delay is the only lever. Needs a backend that caps write rates.
	RateLeverSteps int     `yaml:"rate_lever_steps"`
	WriteMBs       float64 `yaml:"throttleable_write_mb_s"`
	// ThrottleableQueue is the mean number of a consumer's requests in a
	// resource (over half a second) at which it counts as saturating
	// it, in whichever direction: a backup's readers and a VM's random
	// I/O as well as writers. A consumer with one request at a time never
	// reaches it. ReadMBs is the read rate (EWMA) above which a consumer
	// is throttleable, as WriteMBs is for writes. 0 disables either
	// rule; both 0 is the thesis: only writers above
	// throttleable_write_mb_s and the static throttleable consumers are
	// slowed. Defaults 1.25 and 1 MB/s (agent/saturation.go).
	ThrottleableQueue float64    `yaml:"throttleable_queue"`
	ReadMBs           float64    `yaml:"throttleable_read_mb_s"`
	Resources         []Resource `yaml:"resources"`
	SourcePath        string     `yaml:"-"`
	// Warnings are problems that do not stop the config (e.g. reservations
	// close to the stated capacity); the agent logs them.
	Warnings []string `yaml:"-"`
}

// Discovery chooses where consumers and resources come from.
type Discovery struct {
	Source   string        `yaml:"source"` // tgt|lio|iet|static
	Interval time.Duration `yaml:"interval"`
	// Refresh is how often discovery runs anyway when the agent sees the
	// target's iSCSI connections (mode target): then it rediscovers when
	// they change, once more an interval later (the login completes after
	// the TCP handshake), and every Refresh for changes no connection
	// shows (a LUN added to a target).
	Refresh time.Duration `yaml:"refresh"`
	// TgtControlPort is tgtadm's -C (0: default socket).
	TgtControlPort int    `yaml:"tgt_control_port"`
	Root           string `yaml:"root"` // configfs or /proc/net/iet root (tests, containers)
}

// Defaults are the thesis' values where it gives them.
func Defaults() Config {
	return Config{
		Interval: 100 * time.Millisecond, Backend: "auto", Mode: "target", ISCSIPort: 3260,
		Socket: "/run/sanqos/sanqos.sock", HTTP: "127.0.0.1:9311",
		Discovery: Discovery{Source: "tgt", Interval: time.Second, Refresh: 10 * time.Second},
		// Tuned in the lab (pid experiment, 15 ms, 12 writers switched on
		// together): α 0.5, Kp 0.8, Ti 200 ms settled in 0.5 s with p95 1.33×
		// threshold, where the thesis' α 0.25 with Kp 0.4, Ti 300 ms took
		// 2.1 s and reached 1.56×.
		// Objective p95: the threshold is what users read as "reads wait
		// at most this", and only p95 keeps it (lab, autonomic: p95 1.31 /
		// 1.12 / 1.04 × threshold vs 1.44 / 1.30 / 1.20 × with the thesis'
		// mean; simulator 0.97–0.98 × vs 1.15–1.25 ×, keeping 82–93 % of
		// the writes vs 92–93 %).
		Threshold: 15 * time.Millisecond, Objective: "p95", EWMAAlpha: 0.5,
		PID:       PID{Kp: 0.8, Ti: 200 * time.Millisecond, Td: 0},
		DelayStep: 500 * time.Microsecond, MaxDelay: 20 * time.Millisecond, DelayRise: 0, DelayRamp: 0, WriteMBs: 1, ThrottleableQueue: 1.25, ReadMBs: 1,
		WriteDelayOn: "replies", OnsetFeedForward: true,
	}
}

// Load reads and validates a file.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.SourcePath = path
	if c.TokenFile != "" {
		if c.Token, err = readToken(c.TokenFile); err != nil {
			return nil, fmt.Errorf("%s: token_file: %w", path, err)
		}
	}
	return c, nil
}

// MinTokenLen is the shortest token accepted: 16 random bytes, hex.
const MinTokenLen = 32

// readToken reads a bearer token from a file that only its owner can read:
// a token anyone on the machine can read protects nothing.
func readToken(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s is readable by group or others (mode %v): chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < MinTokenLen || strings.ContainsAny(tok, " \t\n") {
		return "", fmt.Errorf("%s: want one token of at least %d characters (e.g. openssl rand -hex 16)", path, MinTokenLen)
	}
	return tok, nil
}

// Error is one problem with a config, at a line.
type Error struct {
	Line  int
	Field string
	Msg   string
}

func (e Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Msg)
}

// maxSize bounds a config file; a larger one is a mistake or an attack.
const maxSize = 1 << 20

// Parse decodes YAML over the defaults, rejecting unknown fields, and
// validates the result as a whole.
func Parse(b []byte) (*Config, error) {
	if len(b) > maxSize {
		return nil, fmt.Errorf("config is %d bytes, limit %d", len(b), maxSize)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, err
	}
	c := Defaults()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	// io.EOF: an empty or comment-only file means "all defaults".
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if errs := c.validate(&root); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &c, nil
}

// MaxResources and MaxConsumers bound a config.
const (
	MaxResources = 10000
	MaxConsumers = 100000
)

func (c *Config) validate(root *yaml.Node) []error {
	var errs []error
	bad := func(msg string, path ...any) {
		errs = append(errs, Error{Line: lineOf(root, path...), Field: fieldName(path...), Msg: msg})
	}
	if c.Interval < 10*time.Millisecond || c.Interval > 10*time.Second {
		bad("want 10ms..10s", "interval")
	}
	switch c.Backend {
	case "auto", "edt", "delayline", "netem", "htb", "delayline+htb", "dry-run":
	default:
		bad("want auto|edt|delayline|netem|htb|delayline+htb|dry-run", "backend")
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
	if c.DelayFollow && c.DelayRamp > 0 {
		bad("delay_follow and delay_ramp exclude each other", "delay_follow")
	}
	if lineOf(root, "delay_follow") == 0 {
		c.DelayFollow = c.WriteDelayOn == "acks" && c.DelayRamp == 0
	}
	switch {
	case c.RateLeverSteps < 0 || c.RateLeverSteps > 200:
		bad("want 0 (the delay alone)..200 steps of write-rate caps past max_delay", "rate_lever_steps")
	case c.RateLeverSteps > 0 && !strings.HasSuffix(c.Backend, "+htb") && c.Backend != "dry-run":
		bad(fmt.Sprintf("needs a backend that delays and caps write rates (delayline+htb), not %s", c.Backend), "rate_lever_steps")
	case c.RateLeverSteps > 0:
		c.Warnings = append(c.Warnings, Error{Line: lineOf(root, "rate_lever_steps"), Field: fieldName("rate_lever_steps"),
			Msg: "write caps queue a capped writer's segments on the target's ingress, and its TCP, which had seen its data acknowledged at once, sends spurious tail-loss probes (lab, 12 iSCSI writers at 10 ms: 250-350 DSACKed probes in six load steps, 0 RTO); see README"}.Error())
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
	if c.Threshold <= 0 || c.Threshold > 10*time.Second {
		bad("want 0..10s", "threshold")
	}
	if len(c.Resources) > MaxResources {
		bad(fmt.Sprintf("%d resources, limit %d", len(c.Resources), MaxResources), "resources")
	}
	names := map[string]bool{}
	consumers := 0
	for i := range c.Resources {
		r := &c.Resources[i]
		if r.Name == "" || len(r.Name) > 64 || strings.ContainsAny(r.Name, " \t\n/\"") {
			bad("want a non-empty name without spaces, quotes or slashes (≤ 64)", "resources", i, "name")
		} else if names[r.Name] {
			bad("duplicate resource name "+r.Name, "resources", i, "name")
		}
		names[r.Name] = true
		if r.Threshold == 0 {
			r.Threshold = c.Threshold
		} else if r.Threshold < 0 || r.Threshold > 10*time.Second {
			bad("want 0..10s", "resources", i, "threshold")
		}
		if len(r.Devices) == 0 {
			r.Devices = []string{"auto"}
		}
		for k, d := range r.Devices {
			if d == "" || strings.ContainsAny(d, "/ \t") && d != "auto" {
				bad("want a diskstats device name (e.g. loop3, sdb) or auto", "resources", i, "devices", k)
			}
		}
		if r.Policy == "" {
			r.Policy = "read-over-write"
		}
		if r.Objective == "" {
			r.Objective = c.Objective
		}
		if !slices.Contains(Objectives, r.Objective) {
			bad(fmt.Sprintf("unknown objective %q: want %s", r.Objective, strings.Join(Objectives, "|")), "resources", i, "objective")
		}
		if !slices.Contains(Policies, r.Policy) {
			bad(fmt.Sprintf("unknown policy %q: want %s", r.Policy, strings.Join(Policies, "|")), "resources", i, "policy")
		}
		errs = append(errs, c.validatePolicy(root, i)...)
		errs = append(errs, c.validateReservations(root, i)...)
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
	}
	errs = append(errs, c.validateBridge(root)...)
	if consumers > MaxConsumers {
		bad(fmt.Sprintf("%d static consumers, limit %d", consumers, MaxConsumers), "resources")
	}
	if c.Discovery.Source == "static" {
		for i, r := range c.Resources {
			if len(r.Devices) == 1 && r.Devices[0] == "auto" {
				bad("static discovery needs explicit devices", "resources", i, "devices")
			}
		}
	}
	return errs
}

// validateBridge checks what bridge mode needs and refuses its settings
// in target mode: every resource named by portals (distinct across
// resources), no devices (there is no diskstats), and a capture interface.
func (c *Config) validateBridge(root *yaml.Node) []error {
	var errs []error
	bad := func(msg string, path ...any) {
		errs = append(errs, Error{Line: lineOf(root, path...), Field: fieldName(path...), Msg: msg})
	}
	if c.Mode != "bridge" {
		if c.CaptureInterface != "" {
			bad("applies to mode bridge only", "capture_interface")
		}
		for i, r := range c.Resources {
			if len(r.Portals) > 0 {
				bad("portals apply to mode bridge only", "resources", i, "portals")
			}
		}
		return errs
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
	return errs
}

// validatePolicy checks resource i's weights and classes against its
// policy: settings for another policy are a mistake, not something to ignore.
func (c *Config) validatePolicy(root *yaml.Node, i int) []error {
	var errs []error
	bad := func(msg string, path ...any) {
		errs = append(errs, Error{Line: lineOf(root, path...), Field: fieldName(path...), Msg: msg})
	}
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
		if cl.Priority == 0 {
			cl.Priority = len(r.Classes) - k
		}
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
	return errs
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

// lineOf finds the line of a field in the YAML tree (0 if absent: the
// value came from the defaults).
func lineOf(root *yaml.Node, path ...any) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := 0
	for _, p := range path {
		switch v := p.(type) {
		case string:
			if n.Kind != yaml.MappingNode {
				return line
			}
			found := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == v {
					line = n.Content[i].Line
					n = n.Content[i+1]
					found = true
					break
				}
			}
			if !found {
				return line
			}
		case int:
			if n.Kind != yaml.SequenceNode || v >= len(n.Content) {
				return line
			}
			n = n.Content[v]
			line = n.Line
		}
	}
	return line
}
