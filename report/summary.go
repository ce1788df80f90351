package report

// The summary.json shapes shared by the lab (real experiments) and the
// simulator, so one report tool reads both. They live here, not in lab, so
// the simulator needs nothing from the lab.

// TCPCounters are the TCP counters that tell loss from its look-alikes,
// summed over the target and initiator namespaces.
type TCPCounters struct {
	// RetransSegs is every retransmitted segment (snmp Tcp RetransSegs).
	RetransSegs uint64 `json:"retrans_segs"`
	// LossProbes are tail-loss probes (TcpExt TCPLossProbes): the sender
	// resends its last segment when no ACK came within ~2 RTT. They count
	// in RetransSegs but are timer-driven, not loss-driven; in this lab
	// they come from the initiators' delayed ACKs with no throttle at all.
	LossProbes uint64 `json:"loss_probes"`
	// DSACKRecv counts duplicate SACKs received: the peer had the data, so
	// the retransmission was spurious.
	DSACKRecv uint64 `json:"dsack_recv"`
	// Timeouts are RTO expiries (TcpExt TCPTimeouts): what real loss or a
	// delay near TCP_RTO_MIN would cause.
	Timeouts uint64 `json:"rto_timeouts"`
	// HostQueueSkips (TcpExt TCPSpuriousRtxHostQueues) are retransmissions
	// and probes the kernel's timer asked for while the segment was still
	// queued on its host, so none was sent: what a delay that outgrows the
	// sender's srtt causes where it holds the sender's own segments (the
	// target's, under the delay line). Not in RetransSegs.
	HostQueueSkips uint64 `json:"host_queue_skips"`
	// FastRetrans (TcpExt TCPFastRetrans) are retransmissions sent because
	// the peer's ACKs (duplicate ACKs, SACK blocks, RACK) said a segment
	// was lost, not because a timer fired: what a dropped or reordered
	// segment causes. Counted in RetransSegs.
	FastRetrans uint64 `json:"fast_retrans"`
	// RcvDrops are segments this host's TCP received and threw away
	// (TcpExt TCPRcvQDrop, TCPBacklogDrop, RcvPruned, TCPOFODrop,
	// OfoPruned): a receive queue over its buffer, an out-of-order queue
	// pruned. (TCPZeroWindowDrop is not among them: prometheus/procfs,
	// which reads the counters, does not parse it.) The peer retransmits each
	// one, so a retransmission with no probe, timeout or DSACK behind it
	// is explained here or on the path between the hosts.
	RcvDrops uint64 `json:"rcv_drops"`
}

// NonProbe is retransmissions not explained by tail-loss probes: the
// figure that must stay zero for a throttle that loses no packets.
func (c TCPCounters) NonProbe() uint64 {
	if c.LossProbes > c.RetransSegs {
		return 0
	}
	return c.RetransSegs - c.LossProbes
}

// Sub is c − o, counter by counter.
func (c TCPCounters) Sub(o TCPCounters) TCPCounters {
	return c.combine(o, func(a, b uint64) uint64 { return a - b })
}

// Add is c + o, counter by counter.
func (c TCPCounters) Add(o TCPCounters) TCPCounters {
	return c.combine(o, func(a, b uint64) uint64 { return a + b })
}

// counters is every field of c, in declaration order: the one place a
// new counter is listed for Add and Sub (TestTCPCountersListsEveryField
// holds it to the struct).
func (c *TCPCounters) counters() []*uint64 {
	return []*uint64{&c.RetransSegs, &c.LossProbes, &c.DSACKRecv, &c.Timeouts, &c.HostQueueSkips, &c.FastRetrans, &c.RcvDrops}
}

func (c TCPCounters) combine(o TCPCounters, f func(a, b uint64) uint64) TCPCounters {
	theirs := o.counters()
	for i, p := range c.counters() {
		*p = f(*p, *theirs[i])
	}
	return c
}

// TCPSides splits TCP counters by who sends: the throttled writers'
// hosts (they send the write data whose ACKs the throttle delays), the
// protected reader's host, and the target.
type TCPSides struct {
	Writers TCPCounters `json:"writers"`
	Reader  TCPCounters `json:"reader"`
	Target  TCPCounters `json:"target"`
}

// Total is every side's counters summed.
func (s TCPSides) Total() TCPCounters { return s.Writers.Add(s.Reader).Add(s.Target) }

// Add is s + o, side by side.
func (s TCPSides) Add(o TCPSides) TCPSides {
	return TCPSides{s.Writers.Add(o.Writers), s.Reader.Add(o.Reader), s.Target.Add(o.Target)}
}

// InterferenceRun is one writer count's result.
type InterferenceRun struct {
	Writers    int  `json:"writers"`
	ReadWaitMs Dist `json:"read_wait_ms"`
	// Initiator is the reader's latency at the initiator (lab runs).
	Initiator    *InitiatorLatency `json:"initiator,omitempty"`
	WriteMBs     float64           `json:"write_mb_s"`
	P95PerRepeat []float64         `json:"p95_per_repeat"`
}

// InterferenceSummary is summary.json of interference.
type InterferenceSummary struct {
	Experiment string            `json:"experiment"`
	Scale      float64           `json:"scale"`
	Runs       []InterferenceRun `json:"runs"`
	// P95Ratio12 is p95 read wait with 12 writers over that with none.
	P95Ratio12 float64     `json:"p95_ratio_12_vs_0"`
	Retrans    uint64      `json:"retransmits"`
	TCP        TCPCounters `json:"tcp"`
}

// ControlledRun is one threshold's (or the baseline's) result.
type ControlledRun struct {
	ThresholdMs float64 `json:"threshold_ms,omitempty"`
	// Backend is the throttle backend of this run, and AgentCPUPct the
	// regulating agent's CPU over it (% of a core, backend included), when
	// one invocation compares backends (lab --backends). ControlCPUPct
	// is its shadow's over the same run (same config, dry-run backend):
	// the control loop alone, so AgentCPUPct − ControlCPUPct is what the
	// backend costs, measured on the same machine at the same moment.
	Backend string `json:"backend,omitempty"`
	// Variant is the YAML added to the agent's config of this run when
	// one invocation compares configs (lab --compare-set).
	Variant       string  `json:"variant,omitempty"`
	AgentCPUPct   float64 `json:"agent_cpu_pct,omitempty"`
	ControlCPUPct float64 `json:"control_loop_cpu_pct,omitempty"`
	ReadWaitMs    Dist    `json:"read_wait_ms"`
	// Initiator is the same reader's latency at the initiator, over the
	// same window: what it sees through TCP and the target, beside
	// ReadWaitMs, the target's await of its LUN (lab runs only).
	Initiator *InitiatorLatency `json:"initiator,omitempty"`
	// WriteMBs and ReadMBs are the interferers' aggregate rates (not the
	// protected reader's); ReadMBs is 0 where they only write.
	WriteMBs float64 `json:"write_mb_s"`
	ReadMBs  float64 `json:"read_mb_s,omitempty"`
	// PctAbove is the share of 100 ms intervals (with reads) in which the
	// reader's wait exceeded 1.2 × threshold.
	PctAbove float64 `json:"pct_time_above_1_2x_threshold"`
	// SettleS is, averaged over the writers' on-steps, the time from the
	// step until the smoothed (EWMA 0.15) wait last crossed above 1.2 ×
	// threshold during that on-period.
	SettleS  float64 `json:"settle_s_after_step"`
	MaxDelay float64 `json:"max_delay_ms,omitempty"`
	// Throttled is the share of the writers' window with a delay applied.
	Throttled float64 `json:"pct_time_throttled,omitempty"`
	// TCP is this run's retransmission counters (compare with baseline's).
	TCP TCPCounters `json:"tcp"`
	// TCPBySide is TCP split by sender (lab runs only).
	TCPBySide *TCPSides `json:"tcp_by_side,omitempty"`
	// LossProbesAtStalls are the target's loss probes sent in a second
	// in which the lab machine stalled (Host.Stalls), of all its probes
	// counted second by second (lab runs, agent off included).
	LossProbesAtStalls *ProbesAtStalls `json:"loss_probes_at_stalls,omitempty"`
	// LossProbesAtStallsBySide is the same for each sender, the
	// initiators' namespaces sampled each second too (a side with no
	// namespace sampled twice is absent).
	LossProbesAtStallsBySide *ProbesAtStallsBySide `json:"loss_probes_at_stalls_by_side,omitempty"`
	// RetransAtStallsBySide is the same for retransmitted segments (At
	// and Of count segments): how many of TCP's the machine's stalls can
	// account for.
	RetransAtStallsBySide *ProbesAtStallsBySide `json:"retrans_at_stalls_by_side,omitempty"`
	// Host is the lab machine's CPU use over the run, and DelayLineLate
	// how late this run's delay line released (lab runs only): a run with
	// probes can be told apart as starved or not.
	Host          *HostCPU     `json:"host_cpu,omitempty"`
	DelayLineLate *LateSummary `json:"delayline_release_late_ms,omitempty"`
	// Onset is the reader's wait in the first second after each load step.
	Onset *Onset `json:"onset,omitempty"`
	// Unreachable says why slowing writers cannot hold this threshold: it
	// is at or below the reader's own wait with no writer at all.
	Unreachable string `json:"unreachable,omitempty"`
	// Criteria relates the run to its threshold, the baseline and the
	// oracle of the same invocation (ControlledSummary.Judge).
	Criteria *Criteria `json:"criteria,omitempty"`
	// ThresholdAuto is how the agent chose the run's threshold under
	// threshold: auto (lab --threshold-auto); ThresholdMs is its choice.
	ThresholdAuto *AutoThresholdRun `json:"threshold_auto,omitempty"`
	// Events digests the agent's events over the run: whom it slowed,
	// released or held, and why (regulated runs).
	Events *ThrottleEvents `json:"events,omitempty"`
}

// InitiatorLatency is the protected reader's completion latency at the
// initiator (fio's clat, logged for every read): each read's, and the
// mean of the reads that completed in each 100 ms that had any, the
// interval over which the target's await is sampled (ReadWaitMs).
type InitiatorLatency struct {
	ReadMs   Dist `json:"read_ms"`
	WindowMs Dist `json:"window_ms"`
}

// AutoThresholdRun is threshold: auto in one run, from the agent's status
// sampled every 500 ms.
type AutoThresholdRun struct {
	// State is the learner's at the end: learned, or learning (the
	// threshold stayed at its start).
	State string `json:"state"`
	// ChosenMs is the threshold in force at the end; LearnedAtS when the
	// agent first had learned one (s into the phase; 0: never), and
	// MinMs, MaxMs the range of the thresholds it held from then on.
	ChosenMs   float64 `json:"chosen_ms"`
	StartMs    float64 `json:"start_ms"`
	LearnedAtS float64 `json:"learned_at_s,omitempty"`
	MinMs      float64 `json:"min_ms,omitempty"`
	MaxMs      float64 `json:"max_ms,omitempty"`
	Changes    int     `json:"changes"`
	// What the last estimate rested on: the peak throughput, the wait at
	// 90 % of it, and the floor (the read wait with no interferer, the
	// lowest the agent's estimate was) it stays 1.15 × above.
	PeakMBs      float64 `json:"peak_mb_s,omitempty"`
	WaitAtPeakMs float64 `json:"wait_at_90pct_peak_ms,omitempty"`
	FloorMs      float64 `json:"floor_ms,omitempty"`
	// ReaderP95SinceLearnedMs is the reader's p95 over the phase's
	// window from LearnedAtS on, and P95XChosen its ratio to ChosenMs
	// (the whole window's ratio is Criteria.P95X).
	ReaderP95SinceLearnedMs float64 `json:"reader_p95_since_learned_ms,omitempty"`
	P95XChosen              float64 `json:"reader_p95_since_learned_x_chosen,omitempty"`
}

// Criteria are a regulated run's figures as ratios: to its threshold, to
// the unregulated baseline and to the oracle, all from one invocation.
type Criteria struct {
	P95X float64 `json:"p95_x_threshold"`
	P99X float64 `json:"p99_x_threshold"`
	// InitiatorP95X is P95X at the initiator: the p95 of the reader's
	// 100 ms windows there (ControlledRun.Initiator) over the threshold;
	// InitiatorReadP95X the p95 of its reads (lab runs only).
	InitiatorP95X     float64 `json:"initiator_p95_x,omitempty"`
	InitiatorReadP95X float64 `json:"initiator_read_p95_x,omitempty"`
	FirstSecondX      float64 `json:"first_second_x_threshold"`
	// FirstSecondFloorX is that step's floor (Onset.FloorMs) over the
	// threshold: where it is above FirstSecondX's mark, the queue the
	// controller found when it first acted, not its later steps, made
	// the first second (0: no queue recorded).
	FirstSecondFloorX float64 `json:"first_second_floor_x_threshold,omitempty"`
	KeptVsBaseline    float64 `json:"write_kept_vs_baseline"`
	// KeptVsOracle is the run's write rate over the oracle's at the same
	// threshold (0: no oracle ran).
	KeptVsOracle float64 `json:"write_kept_vs_oracle,omitempty"`
	// MovedKeptVsBaseline and MovedKeptVsOracle are the same ratios on
	// the interferers' reads plus writes: the throughput kept where the
	// interferers read (a backup) or do both (mixed I/O).
	MovedKeptVsBaseline float64 `json:"moved_kept_vs_baseline,omitempty"`
	MovedKeptVsOracle   float64 `json:"moved_kept_vs_oracle,omitempty"`
	// OracleP95X is the oracle run's own p95 over the threshold. The
	// oracle's delay is found on steady-load probes; on loads that read
	// it is set after each on-step's logins, and the onsets can leave its
	// run well above the threshold, unless the lab's oracle raised its
	// delay until it held (OracleRun.Held: this at most OracleHoldsX).
	OracleP95X float64 `json:"oracle_p95_x_threshold,omitempty"`
	// Retrans, LossProbes, Timeouts and HostQueueSkips are this run's
	// (every sender); the Baseline ones the unregulated run's, for "no
	// more than the baseline".
	Retrans                uint64 `json:"retrans_segs"`
	LossProbes             uint64 `json:"loss_probes"`
	Timeouts               uint64 `json:"rto_timeouts"`
	HostQueueSkips         uint64 `json:"host_queue_skips"`
	BaselineRetrans        uint64 `json:"baseline_retrans_segs"`
	BaselineLossProbes     uint64 `json:"baseline_loss_probes"`
	BaselineHostQueueSkips uint64 `json:"baseline_host_queue_skips"`
}

// OracleRun is the best static write delay on every writer for one
// threshold: the smallest that holds the reader's p95 at the threshold
// under steady load, found by bisection, then run with the experiment's
// own load pattern. A controller that must find its delay online is
// judged by the writes it keeps against this one, which knew it.
type OracleRun struct {
	ThresholdMs float64 `json:"threshold_ms"`
	DelayMs     float64 `json:"delay_ms"`
	// Reachable is false when even the largest delay left the steady p95
	// above the threshold; DelayMs is then the largest.
	Reachable bool `json:"reachable"`
	// Regime is when the static delay was set: "first-packet" (before
	// the load's sessions log in, the thesis' oracle for writers) or
	// "after-login" (on established sessions, as the agent acts; loads
	// that read, where the two differ several-fold).
	Regime string        `json:"regime,omitempty"`
	Probes []OracleProbe `json:"probes"`
	// Run is the load pattern at DelayMs (nil if it did not run).
	Run *ControlledRun `json:"run,omitempty"`
	// Held says Run's p95 is within OracleHoldsX of the threshold (Judge
	// derives it, for the lab's oracle and the simulator's). The lab's
	// oracle raises its delay until it does (RaiseUntilHeld): FoundMs is
	// then the probes' answer and Attempts every run of the load, the
	// last being Run.
	Held     bool            `json:"held"`
	FoundMs  float64         `json:"found_delay_ms,omitempty"`
	Attempts []OracleAttempt `json:"attempts,omitempty"`
}

// OracleAttempt is one run of the load at a static delay.
type OracleAttempt struct {
	DelayMs  float64 `json:"delay_ms"`
	P95Ms    float64 `json:"p95_ms"`
	WriteMBs float64 `json:"write_mb_s"`
	ReadMBs  float64 `json:"read_mb_s,omitempty"`
}

// OracleProbe is one steady-load probe of the bisection.
type OracleProbe struct {
	DelayMs  float64 `json:"delay_ms"`
	P95Ms    float64 `json:"p95_ms"`
	WriteMBs float64 `json:"write_mb_s"`
	ReadMBs  float64 `json:"read_mb_s,omitempty"`
}

// HostCPU is a machine's CPU use over a run, in % of all its CPUs' time.
// StealPct is time the hypervisor gave to others while a vCPU had work.
// Stalls are its stalls, if they were watched.
type HostCPU struct {
	BusyPct  float64     `json:"busy_pct"`
	StealPct float64     `json:"steal_pct"`
	Stalls   *HostStalls `json:"stalls,omitempty"`
}

// ProbesAtStalls are a run's loss probes (or, in RetransAtStallsBySide,
// retransmitted segments) that came in a second with a machine stall
// (At) out of all (Of).
type ProbesAtStalls struct {
	At uint64 `json:"at"`
	Of uint64 `json:"of"`
}

// ProbesAtStallsBySide are ProbesAtStalls by sender, as TCPSides.
type ProbesAtStallsBySide struct {
	Writers *ProbesAtStalls `json:"writers,omitempty"`
	Reader  *ProbesAtStalls `json:"reader,omitempty"`
	Target  *ProbesAtStalls `json:"target,omitempty"`
}

// HostStalls count the episodes in which a CPU ran none of the lab's
// real-time watch threads for 8 ms or more, and the longest
// (lab/stalls.go): a spurious tail-loss probe in a phase with stalls may
// be the machine's, not the code's.
type HostStalls struct {
	Over8ms int     `json:"over_8ms"`
	MaxMs   float64 `json:"max_ms"`
}

// BeforeAfterPlot is the plot a controlled run (pid, autonomic,
// read-backup, mixed) draws in its directory: the protected reader's read
// wait through the same load with the agent off (no regulation) and on,
// one line per threshold. It is the product's cure in one picture:
// scripts/demo.sh ends with it (sanqos-lab report names it) and the README
// shows one (docs/img/before-after.png).
const BeforeAfterPlot = "read-wait.png"

// ControlledSummary is summary.json of pid and autonomic.
type ControlledSummary struct {
	Experiment string `json:"experiment"`
	// Interferers names the load the reader is protected from: writers
	// (the thesis'), readers (a backup) or mixed (random reads and
	// writes); empty means writers.
	Interferers string `json:"interferers,omitempty"`
	// Backend is the regulating agent's throttle backend; Writers and
	// Cycles the load's writer threads and on/off cycles (lab runs).
	Backend   string          `json:"backend,omitempty"`
	Backends  []string        `json:"backends,omitempty"`
	Writers   int             `json:"writers,omitempty"`
	Cycles    int             `json:"cycles,omitempty"`
	Baseline  ControlledRun   `json:"baseline"`
	Regulated []ControlledRun `json:"regulated"`
	Retrans   uint64          `json:"retransmits"`
	// RegulatedRetrans counts only the regulated runs' retransmitted
	// segments (every sender): the baseline's, with no agent, are the
	// lab's own (lab runs only).
	RegulatedRetrans *uint64     `json:"regulated_retransmits,omitempty"`
	TCP              TCPCounters `json:"tcp"`
	// TCPBySide splits TCP by sender over all runs; RegulatedTCPBySide
	// over the regulated runs only (lab runs only).
	TCPBySide          *TCPSides `json:"tcp_by_side,omitempty"`
	RegulatedTCPBySide *TCPSides `json:"regulated_tcp_by_side,omitempty"`
	// AgentCPUPct is the agent process's CPU (share of one core) during the
	// regulated runs: control loops plus the userspace delay line, which
	// handles every throttled packet. ControlCPUPct is a shadow agent's
	// with the same config and the dry-run backend: the control loops
	// (sampling, discovery, TCP_INFO, PID) alone.
	AgentCPUPct   float64 `json:"agent_cpu_pct"`
	ControlCPUPct float64 `json:"control_loop_cpu_pct"`
	// DelayLinePackets were held by the agent's delay line over the
	// regulated runs; DelayLineUSPerPacket is the agent's CPU beyond its
	// shadow's (the backend is all that differs) per held packet, so the
	// data plane's share at another packet rate can be worked out.
	DelayLinePackets     uint64  `json:"delayline_packets,omitempty"`
	DelayLineUSPerPacket float64 `json:"delayline_cpu_us_per_packet,omitempty"`
	// DelayLineLate is how late the held packets left against their due
	// time, over the regulated runs: the delay line's own error.
	DelayLineLate *LateSummary `json:"delayline_release_late_ms,omitempty"`
	// ReaderAloneP95Ms is the reader's p95 wait before any writer starts:
	// the floor no throttle of writers can go below.
	ReaderAloneP95Ms float64 `json:"reader_alone_p95_ms,omitempty"`
	// Oracle holds the best static delay per threshold (lab autonomic).
	Oracle []OracleRun `json:"oracle,omitempty"`
}

// Judge fills every regulated run's Criteria from the baseline and the
// oracle of the same threshold.
func (s *ControlledSummary) Judge() {
	for i := range s.Oracle {
		o := &s.Oracle[i]
		o.Held = o.Run != nil && oracleHolds(o.Run.ReadWaitMs.P95, o.ThresholdMs)
	}
	for i := range s.Regulated {
		r := &s.Regulated[i]
		if r.ThresholdMs <= 0 {
			continue
		}
		c := &Criteria{
			P95X: Round(r.ReadWaitMs.P95/r.ThresholdMs, 2), P99X: Round(r.ReadWaitMs.P99/r.ThresholdMs, 2),
			Retrans: r.TCP.RetransSegs, LossProbes: r.TCP.LossProbes, Timeouts: r.TCP.Timeouts, HostQueueSkips: r.TCP.HostQueueSkips,
			BaselineRetrans: s.Baseline.TCP.RetransSegs, BaselineLossProbes: s.Baseline.TCP.LossProbes, BaselineHostQueueSkips: s.Baseline.TCP.HostQueueSkips,
		}
		if in := r.Initiator; in != nil {
			c.InitiatorP95X, c.InitiatorReadP95X = Round(in.WindowMs.P95/r.ThresholdMs, 2), Round(in.ReadMs.P95/r.ThresholdMs, 2)
		}
		if r.Onset != nil && r.Onset.Steps > 0 {
			c.FirstSecondX = Round(r.Onset.WorstMeanMs/r.ThresholdMs, 2)
			c.FirstSecondFloorX = Round(r.Onset.FloorMs/r.ThresholdMs, 2)
		}
		if s.Baseline.WriteMBs > 0 {
			c.KeptVsBaseline = Round(r.WriteMBs/s.Baseline.WriteMBs, 3)
		}
		moved := func(x ControlledRun) float64 { return x.WriteMBs + x.ReadMBs }
		if b := moved(s.Baseline); b > 0 && s.Baseline.ReadMBs > 0 {
			c.MovedKeptVsBaseline = Round(moved(*r)/b, 3)
		}
		for _, o := range s.Oracle {
			if o.ThresholdMs != r.ThresholdMs || o.Run == nil {
				continue
			}
			if o.Run.WriteMBs > 0 {
				c.KeptVsOracle = Round(r.WriteMBs/o.Run.WriteMBs, 3)
			}
			if m := moved(*o.Run); m > 0 && o.Run.ReadMBs > 0 {
				c.MovedKeptVsOracle = Round(moved(*r)/m, 3)
			}
			c.OracleP95X = Round(o.Run.ReadWaitMs.P95/r.ThresholdMs, 2)
		}
		r.Criteria = c
	}
}

// LateSummary condenses a release-lateness histogram. P50 and P99 are the
// upper bounds of the buckets that hold them (the histogram's resolution);
// Max is exact.
type LateSummary struct {
	P50      float64 `json:"p50"`
	P99      float64 `json:"p99"`
	Max      float64 `json:"max"`
	PctOver2 float64 `json:"pct_over_2ms"`
	Releases uint64  `json:"releases"`
}
