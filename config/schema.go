package config

// docs/configuration.md is generated from this file, reservations.go,
// validate.go and the defaults; its test fails until it is regenerated.
//go:generate go run ../internal/configdoc

import (
	"time"

	"gopkg.in/yaml.v3"
)

// PID holds the gains of the thesis' controller (equation 4.2).
type PID struct {
	// Kp is the proportional gain, in delay steps per ms of error (read
	// wait above its setpoint).
	Kp float64 `yaml:"kp"`
	// Ti is the integral time: the integral adds Kp × T/Ti steps per tick
	// per ms of error (T the interval).
	Ti time.Duration `yaml:"ti"`
	// Td is the derivative time; 0 turns the derivative term off.
	Td time.Duration `yaml:"td"`
}

// Resource is one shared pool sanqos protects.
type Resource struct {
	// Name names the resource in logs, status and metrics; with devices
	// [auto] it also picks the discovered pool whose target IQN ends in
	// ":name".
	Name string `yaml:"name"`
	// Devices are the block devices (diskstats names) whose read wait is the
	// resource's indicator; ["auto"] discovers them from the target.
	Devices []string `yaml:"devices"`
	// Threshold is the read wait this resource is held under, or auto
	// (learned, as the top-level threshold says). Default: the top-level
	// threshold.
	Threshold time.Duration `yaml:"threshold"`
	// ThresholdAuto is threshold: auto; Threshold is then AutoStart.
	ThresholdAuto bool `yaml:"-"`
	// Important are consumers (IP addresses) that are never slowed; under
	// policy important-sets their reads alone are the indicator.
	Important []string `yaml:"important"`
	// Throttleable are consumers (IP addresses) that are slowed whenever
	// the resource is above its threshold, whatever their rates.
	Throttleable []string `yaml:"throttleable"`
	// Policy decides who is slowed and how: read-over-write,
	// important-sets, weighted, slo-classes or reservations
	// (docs/operator-guide.md, "Policies").
	Policy string `yaml:"policy"`
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
	// (port default iscsi_port, or 4420 for protocol nvme-tcp), since a
	// bridge has no tgtadm to ask.
	Portals []string `yaml:"portals"`
	// Protocol is what the portals speak in bridge mode, which the read
	// wait is parsed from: iscsi (SCSI commands) or nvme-tcp (NVMe
	// commands). Default: nvme-tcp where every portal is on port 4420,
	// else iscsi.
	Protocol string `yaml:"protocol"`
	// Reservations are the reservations policy's promises: an amount of
	// a consumer's traffic in every period (reservations.go).
	Reservations []Reservation `yaml:"reservations"`
	// NetThreshold is the queueing delay (srtt − min_rtt of the
	// consumers' connections) above which the reservations policy calls
	// the network congested.
	NetThreshold time.Duration `yaml:"net_threshold"`
	// CapacityMBs is the resource's capacity as the reservations policy
	// checks the reservations against it (0: unknown, not checked).
	CapacityMBs float64 `yaml:"capacity_mb_s"`
}

// Protocols are what a bridge resource's portals may speak (see
// Resource.Protocol).
var Protocols = []string{"iscsi", "nvme-tcp"}

// Objectives are what a threshold can bound (see Resource.Objective).
var Objectives = []string{"mean", "p95"}

// Policies are the valid resource policies, in the order help lists them.
var Policies = []string{"read-over-write", "important-sets", "weighted", "slo-classes", "reservations"}

// Class is one service class of the slo-classes policy (seed 004's task,
// knowledge and power users): its members and their objectives. A zero
// objective is none.
type Class struct {
	// Name names the class in status and summaries.
	Name string `yaml:"name"`
	// Members are the class's consumers (IP addresses); a consumer is in
	// one class at most.
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

// Config is the agent's whole configuration. A field tagged
// reload:"restart" is one a running agent cannot take over on SIGHUP
// (RestartChanges).
type Config struct {
	// Interval is the sample period of /proc/diskstats and the tick of
	// every resource's controller.
	Interval time.Duration `yaml:"interval" reload:"restart"`
	// Backend is how consumers are slowed: auto (edt where the kernel has
	// fq and tc BPF, else netem, else the delay line; `sanqos doctor` says
	// which and why), edt, netem, delayline, htb (rate caps only),
	// delayline+htb and edt+htb (the delay line or edt, and write-rate
	// caps for rate_lever_steps) or dry-run (records what it would do,
	// touches nothing: a shadow agent).
	Backend string `yaml:"backend" reload:"restart"`
	// Mode is where the agent runs: target (on the iSCSI target; OUTPUT
	// chain) or bridge (on a Linux bridge in front of it; FORWARD chain,
	// read wait measured on the wire).
	Mode string `yaml:"mode" reload:"restart"`
	// ISCSIPort is the target's TCP port when it is one: `iscsi_port: N`
	// is `ports: [N]`, and bridge portals default to it.
	ISCSIPort int `yaml:"iscsi_port" reload:"restart"`
	// Ports are the target's TCP ports: the traffic from any of them is
	// throttled and their connections are the consumers' rates, whatever
	// the protocol (iSCSI, NVMe/TCP). By default iSCSI's 3260 and
	// NVMe/TCP's 4420, so a host serving both protects both; a port with
	// no traffic costs nothing. At most 15 (iptables' multiport match).
	// A port the target exports on that is not here is reported (status
	// UNTHROTTLED PORT, doctor, metric sanqos_unthrottled_port).
	Ports []int `yaml:"ports" reload:"restart"`
	// Device is the interface towards the consumers, for the backends
	// that attach qdiscs (edt, netem, htb, delayline+htb, edt+htb). Default: the
	// only non-loopback interface that is up; with several, set it.
	Device string `yaml:"device" reload:"restart"`
	// CaptureInterface is where bridge mode watches the iSCSI traffic:
	// the bridge port towards the target.
	CaptureInterface string `yaml:"capture_interface" reload:"restart"`
	// Socket is the control API's unix socket (root only), which the CLI
	// (sanqos status, reload, throttle) talks to: they read it from the
	// config at their --config, by default /etc/sanqos/sanqos.yaml,
	// unless --socket is given.
	Socket string `yaml:"socket" reload:"restart"`
	// HTTP is the read-only listener of the dashboard, /metrics and
	// /api/status, host:port; empty turns it off.
	HTTP string `yaml:"http" reload:"restart"`
	// TokenFile holds the bearer token that opens the control API on the
	// HTTP listener (root-only file); without it HTTP is read-only.
	TokenFile string `yaml:"token_file"`
	// Token is TokenFile's content, read by Load.
	Token string `yaml:"-" reload:"restart"`
	// Discovery is where resources and consumers come from.
	Discovery Discovery `yaml:"discovery"`
	// Threshold is the read wait every resource is held under unless it
	// sets its own: a duration, or auto. To choose one, sanqos doctor
	// --config FILE --window 60s measures each resource's floor and its
	// read wait at its busiest from diskstats and suggests one.
	//
	// auto: the agent learns each resource's threshold online, VMware
	// SIOC's rule adapted to the floor: the read wait the resource shows
	// at 90 % of its peak throughput, from the diskstats samples it takes
	// anyway (over the last 5 minutes of load: the peak is the loaded
	// ticks' 95th percentile of throughput; the wait is the 95th
	// percentile, or the median with objective mean, of the read wait
	// of the ticks moving at least 90 % of it), never below 1.15 × the
	// floor (the read wait with no interferer, the lowest the agent has
	// seen it; within 1.1 × it cannot be met). Until it has seen 10 s of
	// load, 2 s of them near the peak, and the floor, status says
	// learning and the threshold is 15ms (1.15 × the floor if higher), so
	// the resource is protected while it learns. Status (table and JSON:
	// threshold_auto), the threshold metric and the log (at most once a
	// minute) show what it learned.
	//
	// Limits of auto: the agent's own delays shape what it learns from.
	// A threshold it holds at a cost of less than 10 % of the peak stays:
	// the wait of ticks it held is its own doing, so an estimate under
	// the threshold from ticks mostly held does not lower it (nor one
	// within 10 % under or 5 % over), and it does not search below where
	// it started; one that costs more is raised until the resource moves
	// 90 % of its peak again, and comes down when the resource moves its
	// peak at a lower wait without being slowed. The
	// peak is what the resource was seen to move under load, not what it
	// could: a load lighter than the resource's capacity is its own
	// peak. Not in mode bridge (no diskstats).
	Threshold time.Duration `yaml:"threshold"`
	// ThresholdAuto is threshold: auto; Threshold is then AutoStart.
	ThresholdAuto bool `yaml:"-"`
	// Objective is what every resource's threshold bounds unless the
	// resource sets its own: p95 (the 95th percentile of the per-interval
	// read wait is held at the threshold: the setpoint drops below it by
	// the scatter seen over the last two minutes, at some cost in writes)
	// or mean (the thesis: the smoothed wait is held at it, so about half
	// the intervals are above it).
	Objective string `yaml:"objective"`
	// EWMAAlpha smooths the read-wait indicator, per interval (thesis:
	// 0.25 at 100 ms; 0.5 settles a writer burst four times faster in the
	// lab).
	EWMAAlpha float64 `yaml:"ewma_alpha"`
	// PID holds the controller's gains (thesis eq. 4.2, single-sided, with
	// anti-windup); `sanqos-lab tune` searches them on the simulator.
	PID PID `yaml:"pid"`
	// DelayStep is one controller step of added delay.
	DelayStep time.Duration `yaml:"delay_step" reload:"restart"`
	// MaxDelay is the most delay the controller applies to a consumer,
	// kept far below TCP's 200 ms minimum retransmission timeout.
	MaxDelay time.Duration `yaml:"max_delay" reload:"restart"`
	// DelayRise bounds a consumer's delay growth per tick to 2 × its last
	// delay + DelayRise, so throttling never outruns TCP's tail-loss probe
	// timer (2·srtt + 2 ms, rounded up to a jiffy: recent kernels add
	// TCP_TIMEOUT_MIN_US; older kernels add 2 jiffies, 8 ms at HZ=250);
	// keep it below 2 ms. 0 (default) leaves write delays unbounded: in the
	// lab a bound that removes most probes (1 ms) doubled the 10 ms
	// threshold's p95 with write_delay_on: acks, and 6 ms removed none.
	// Read delays always rise under a bound, 1 ms unless this is set: they
	// hold the target's data, several segments in flight, whose probe
	// timer a delay set at once outruns (docs/architecture.md, "Delay rise
	// limit"). So do the write delays of consumers that read too: the
	// backends hold their data for the larger of the two delays.
	DelayRise time.Duration `yaml:"delay_rise" reload:"restart"`
	// DelayRamp is gone: delay_follow replaced it (a fixed rate of rise,
	// which in the lab let load steps through: p95 1.5–2.2 × the
	// threshold). 0, what older configs and the packaged example set, is
	// still accepted, so that they load.
	DelayRamp float64 `yaml:"delay_ramp" reload:"restart"`
	// DelayFollow has the delay line cap each packet's delay by a model
	// of its sender's srtt (throttle/follow.go): the fastest rise that
	// sends no spurious tail-loss probe (it replaced delay_ramp, a fixed
	// rate that let load steps through). Unset, it is on where a held
	// packet is what a sender's timer waits for: with write_delay_on:
	// acks. With replies the
	// held packets are the target's own, which its TCP does not resend
	// while they are still queued on its host, and the consumers' data
	// is acknowledged on time: nothing needs the ramp, and it would only
	// let each load step through for a few round trips
	// (docs/architecture.md, "delay_follow").
	DelayFollow bool `yaml:"delay_follow" reload:"restart"`
	// WriteDelayOn says which packets carry a write delay: "replies"
	// (default: the target's R2Ts and status; ACKs of the consumer's data
	// stay on time, so no spurious tail-loss probes) or "acks" (the
	// thesis: its pure ACKs). See throttle.WriteOn.
	WriteDelayOn string `yaml:"write_delay_on" reload:"restart"`
	// QuickAck sets the route metric quickack on the connected routes of
	// the consumers' interface while a delay backend runs (target mode,
	// write_delay_on: replies), so the target's TCP acknowledges each
	// segment at once instead of piggybacking the ACK on a reply the
	// backend holds, which drew spurious tail-loss probes from writers
	// (lab, delay-sweep with 12 writers: 38 DSACKed probes, 0 with it,
	// rates unchanged; throttle/quickack.go). Taken off at exit. Default
	// true.
	QuickAck bool `yaml:"quick_ack" reload:"restart"`
	// OnsetFeedForward preloads a resource's controller with the delay
	// that held its threshold last time, on the first sample of a write
	// surge, instead of waiting for the smoothed wait to cross (control
	// package, onset.go). Default true.
	OnsetFeedForward bool `yaml:"onset_feedforward" reload:"restart"`
	// IdleHold is how long a consumer that was slowed while it moved data
	// keeps its delays once it moves none (agent, hold.go), so that when
	// it resumes its first segments are slowed as its last ones were,
	// where releasing it let each new load step's first writes reach the
	// disk undelayed. A delay on an idle connection carries nothing; one
	// that resumes light is released 300 ms later. 0: released with the
	// policy. Default 30s.
	IdleHold time.Duration `yaml:"idle_hold" reload:"restart"`
	// RateLeverSteps extends each resource's controller past max_delay
	// with this many steps of write-rate caps on the heaviest writers
	// (agent, lever.go): at the top of the range the capped writers keep
	// 10 % of the rate they had when the delay ran out. 0 (default): the
	// delay is the only lever. Needs a backend that caps write rates
	// (edt+htb, delayline+htb). The lever for writers a delay cannot
	// slow enough: many commands in flight, or commands that each hold
	// the resource long (large writes on a slow group), keep it
	// saturated at max_delay (status: AT MAX).
	RateLeverSteps int `yaml:"rate_lever_steps" reload:"restart"`
	// WriteMBs is the write rate (EWMA) above which a consumer is
	// throttleable: the thesis' rule.
	WriteMBs float64 `yaml:"throttleable_write_mb_s" reload:"restart"`
	// ThrottleableQueue is the mean number of a consumer's requests in a
	// resource (over half a second) at which it counts as saturating
	// it, in whichever direction: a backup's readers and a VM's random
	// I/O as well as writers. A consumer with one request at a time never
	// reaches it. ReadMBs is the read rate (EWMA over two seconds) above
	// which a consumer is throttleable, as WriteMBs is for writes, when
	// its reads average 32 KiB or more: a backup's or a checkpoint's
	// large reads, not a latency-bound reader's small ones one at a
	// time, which move as many bytes as their latency lets them (small
	// reads many at a time meet throttleable_queue). 0 disables either
	// rule; both 0 is the thesis: only writers above
	// throttleable_write_mb_s and the static throttleable consumers are
	// slowed. Defaults 1.25 and 1 MB/s (agent/saturation.go).
	ThrottleableQueue float64 `yaml:"throttleable_queue" reload:"restart"`
	ReadMBs           float64 `yaml:"throttleable_read_mb_s" reload:"restart"`
	// Resources are the shared pools the agent protects, each with its
	// own controller. None: the agent serves manual throttles only.
	Resources  []Resource `yaml:"resources"`
	SourcePath string     `yaml:"-"`
	// Warnings are problems that do not stop the config (e.g. reservations
	// close to the stated capacity); the agent logs them.
	Warnings []string `yaml:"-"`
	// root is the file's YAML tree, for the lines of checks made after
	// Parse (CheckDevices).
	root *yaml.Node
}

// Discovery chooses where consumers and resources come from.
type Discovery struct {
	// Source is where the map of resources and consumers comes from:
	// auto (every target software found on the host, merged: tgt when
	// tgtd's control socket for tgt_control_port exists, LIO when
	// configfs has target/iscsi, the kernel NVMe target when it has
	// nvmet/subsystems; the log, status and doctor say which), tgt
	// (tgtadm), lio (configfs; sessions under node ACLs), nvmet (configfs;
	// subsystems and their namespaces, no sessions), static (the config's
	// devices and consumers only) or iet (parsed, but the agent does not
	// wire it yet and refuses to start).
	Source string `yaml:"source"`
	// Interval is how often discovery runs when the agent cannot watch
	// the target's connections (bridge mode, other sources), and how
	// long after a login it looks again.
	Interval time.Duration `yaml:"interval"`
	// Refresh is how often discovery runs anyway when the agent sees the
	// target's iSCSI connections (mode target): then it rediscovers when
	// they change, once more an interval later (the login completes after
	// the TCP handshake), and every Refresh for changes no connection
	// shows (a LUN added to a target).
	Refresh time.Duration `yaml:"refresh"`
	// TgtControlPort is tgtadm's -C (0: default socket).
	TgtControlPort int `yaml:"tgt_control_port"`
	// Root is where source lio reads configfs (default
	// /sys/kernel/config/target), nvmet reads it (default
	// /sys/kernel/config/nvmet) or iet reads /proc/net/iet; for source
	// auto it is configfs's mount point (default /sys/kernel/config),
	// under which it looks for target/ and nvmet/: for containers, a
	// second configfs mount and tests.
	Root string `yaml:"root"`
}
