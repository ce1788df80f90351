package config

import "time"

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
