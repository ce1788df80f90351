package sim

import (
	"math"
	"time"

	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/report"
)

// Estimate is one load figure on paper (a formula of the sizes and the
// cluster's timing) beside the model's count. A range (low < high) is
// where the formula depends on how often shared steps change.
type Estimate struct {
	Quantity  string  `json:"quantity"`
	Formula   string  `json:"formula"`
	PaperLow  float64 `json:"paper_low"`
	PaperHigh float64 `json:"paper_high"`
	Model     float64 `json:"model"`
}

// ClusterScaleSummary is the cluster-scale scenario's summary.json.
// Times are milliseconds unless named otherwise.
type ClusterScaleSummary struct {
	Experiment  string              `json:"experiment"`
	Options     ClusterScaleOptions `json:"options"`
	Agents      int                 `json:"agents"`
	Resources   int                 `json:"resources"`
	Consumers   int                 `json:"consumers"`
	Spread      int                 `json:"spread"`
	IntervalMs  int                 `json:"interval_ms"`
	SimulatedS  float64             `json:"simulated_s"`
	RateWindowS float64             `json:"rate_window_s"`
	// FormedMs: from the first agent's start until every resource's
	// every agent follows a shared step.
	FormedMs float64 `json:"formed_ms"`
	// WatchBoundMs is EtcdModel.WatchBound: the model's worst put-to-
	// watcher time without saturation.
	WatchBoundMs float64 `json:"etcd_watch_bound_ms"`
	// SpuriousFallbacks counts agents leaving cluster mode in the rate
	// window, when nothing failed: a record that came later than Fresh.
	SpuriousFallbacks int `json:"spurious_fallbacks"`

	// Policy propagation: from the operator's put to the last live
	// agent's policy watch having validated and merged it (per change),
	// and to that agent's next control tick (when the renewed shared
	// controllers run with it). PolicyAgentMs is every (change, agent).
	PolicyChanges        int         `json:"policy_changes"`
	PolicyAppliedByAll   bool        `json:"policy_applied_by_all"`
	PolicyPropagationMs  report.Dist `json:"policy_propagation_ms"`
	PolicyInEffectMs     report.Dist `json:"policy_in_effect_ms"`
	PolicyAgentMs        report.Dist `json:"policy_agent_ms"`
	PolicyBytes          int         `json:"policy_bytes"`
	PolicyApplyCPUMs     report.Dist `json:"policy_apply_cpu_ms"`
	SharedPropagationMs  report.Dist `json:"shared_propagation_ms"`
	SharedDeliveredMs    report.Dist `json:"shared_delivered_ms"`
	SharedRecords        int         `json:"shared_records"`
	SharedRecordsPartial int         `json:"shared_records_not_seen_by_all"`

	// Per agent, over the rate window. AgentTickUs is every agent-tick's
	// time in the agent's own code (local PIDs, Publish, Delay with the
	// leader's step; one goroutine, so its CPU); AgentCPUPerTickUs is, per
	// agent, that plus encoding its writes and decoding its watch events,
	// per tick.
	AgentTickUs       report.Dist `json:"agent_tick_us"`
	AgentCPUPerTickUs report.Dist `json:"agent_cpu_per_tick_us"`
	AgentPutsPerS     report.Dist `json:"agent_puts_per_s"`
	AgentTxnsPerS     report.Dist `json:"agent_txns_per_s"`
	AgentEventsPerS   report.Dist `json:"agent_watch_events_per_s"`
	AgentBytesOutPerS report.Dist `json:"agent_bytes_out_per_s"`
	AgentBytesInPerS  report.Dist `json:"agent_bytes_in_per_s"`
	ResourcesPerAgent report.Dist `json:"resources_per_agent"`
	ResourcesLed      report.Dist `json:"resources_led_per_agent"`
	LeaderlessAtKill  int         `json:"leaderless_resources_at_kill"`
	// Handovers: leaderships handed to a less loaded agent before KillAt
	// (cluster.HandOver); the last one LastHandoverMs after the first
	// agent's start, HandoversInWindow of them in the rate window.
	Handovers          int     `json:"handovers"`
	HandoversInWindow  int     `json:"handovers_in_rate_window"`
	LastHandoverMs     float64 `json:"last_handover_ms"`
	EtcdPutsPerS       float64 `json:"etcd_puts_per_s"`
	EtcdTxnsPerS       float64 `json:"etcd_write_requests_per_s"`
	EtcdKeepAlivesPerS float64 `json:"etcd_keepalives_per_s"`
	EtcdReadsPerS      float64 `json:"etcd_reads_per_s"`
	EtcdEventsPerS     float64 `json:"etcd_watch_events_per_s"`
	EtcdBytesInPerS    float64 `json:"etcd_bytes_in_per_s"`
	EtcdBytesOutPerS   float64 `json:"etcd_bytes_out_per_s"`
	// EtcdRevisionsPerS is how fast the MVCC history grows (one revision
	// per write request), by EtcdBytesInPerS: etcd keeps all of it until
	// compacted.
	EtcdRevisionsPerS float64     `json:"etcd_revisions_per_s"`
	EtcdKeys          int         `json:"etcd_keys"`
	EtcdLeases        int         `json:"etcd_leases"`
	EtcdUtilisation   float64     `json:"etcd_apply_utilisation"`
	EtcdCommitMs      report.Dist `json:"etcd_commit_ms"`
	EtcdBatch         report.Dist `json:"etcd_requests_per_commit"`
	PaperVsModel      []Estimate  `json:"paper_vs_model"`

	// The busiest leader dies at KillAt: its followers' time to leave the
	// shared step (from the death, and from the last record they got),
	// and to follow a new leader (per resource: its last agent).
	Killed               string      `json:"killed_agent"`
	KilledLed            int         `json:"killed_agent_led"`
	FallbackMs           report.Dist `json:"leader_death_fallback_ms"`
	FallbackSinceRecMs   report.Dist `json:"leader_death_fallback_since_last_record_ms"`
	FailoverMs           report.Dist `json:"leader_death_failover_ms"`
	FailoverIncomplete   int         `json:"leader_death_resources_without_new_leader"`
	OutageFallbackMs     report.Dist `json:"etcd_outage_fallback_ms"`
	OutageDecayMs        report.Dist `json:"etcd_outage_decay_ms"`
	OutageNotDecayed     int         `json:"etcd_outage_not_decayed"`
	OutageNothingToDecay int         `json:"etcd_outage_shared_step_was_zero"`
	OutageStepAboveLocal int         `json:"etcd_outage_step_above_local_after_decay"`
	Events               uint64      `json:"events"`
}

func dist(xs []float64) report.Dist { return report.RoundDist(report.Describe(xs)) }

func (s *clusterSim) summary() *ClusterScaleSummary {
	o := s.o
	w := s.window().Seconds()
	sum := &ClusterScaleSummary{Experiment: "cluster-scale", Options: o, Agents: o.Agents, Resources: o.Resources, Consumers: o.Consumers,
		Spread: o.Spread, IntervalMs: int(Interval / time.Millisecond), SimulatedS: o.Length.Seconds(), RateWindowS: w,
		Events: s.events0, WatchBoundMs: ms(o.Etcd.WatchBound()), SpuriousFallbacks: s.spurious}
	if s.formedAt >= 0 {
		sum.FormedMs = report.Round(ms(s.formedAt-s.firstStart()), 1)
	}
	s.policySummary(sum)
	sum.SharedPropagationMs, sum.SharedDeliveredMs = dist(s.sharedProp), dist(s.sharedDeliv)
	sum.SharedRecords = s.recordsDone
	for _, r := range s.res {
		sum.SharedRecordsPartial += len(r.tracks)
	}
	s.agentSummary(sum, w)
	s.etcdSummary(sum, w)
	sum.PaperVsModel = s.paper(sum) // reads the rates set above
	if s.killed != nil {
		s.deathSummary(sum)
	}
	if o.OutageAt > 0 {
		s.outageSummary(sum)
	}
	return sum
}

// firstStart is when the first agent started.
func (s *clusterSim) firstStart() time.Duration {
	first := s.o.Length
	for _, a := range s.agents {
		first = min(first, a.start)
	}
	return first
}

func (s *clusterSim) policySummary(sum *ClusterScaleSummary) {
	o := s.o
	var prop, effect, each, cpu []float64
	sum.PolicyChanges = len(s.policyPut) - 1
	sum.PolicyAppliedByAll = sum.PolicyChanges == o.Policies
	for k := 1; k < len(s.policyPut); k++ {
		var last, lastEff time.Duration
		for _, a := range s.agents {
			if a == s.killed && s.policyPut[k] >= o.KillAt {
				continue // dead before the change
			}
			at, ok := a.appliedPolicy[k]
			eff, ok2 := a.effectAt[k]
			if !ok || !ok2 {
				sum.PolicyAppliedByAll = false
				continue
			}
			each = append(each, ms(at-s.policyPut[k]))
			last, lastEff = max(last, at-s.policyPut[k]), max(lastEff, eff-s.policyPut[k])
		}
		prop, effect = append(prop, ms(last)), append(effect, ms(lastEff))
	}
	for _, a := range s.agents {
		cpu = append(cpu, a.policyCPU...)
	}
	sum.PolicyPropagationMs, sum.PolicyInEffectMs, sum.PolicyAgentMs = dist(prop), dist(effect), dist(each)
	sum.PolicyBytes = len(s.policyDocs[0])
	sum.PolicyApplyCPUMs = dist(cpu)
}

// agentSummary: each agent's rates over the rate window w (seconds), its
// resources and leaderships, and the handovers.
func (s *clusterSim) agentSummary(sum *ClusterScaleSummary, w float64) {
	var ticks, cpuPer, puts, txns, evs, bout, bin, nres []float64
	for _, a := range s.agents {
		nres = append(nres, float64(len(a.slots)))
		if a.ticks == 0 { // (the killed agent counts: the window ends at its death)
			continue
		}
		ticks = append(ticks, a.tickUs...)
		cpuPer = append(cpuPer, float64(a.tickNs+a.bgNs)/1e3/float64(a.ticks))
		puts, txns = append(puts, float64(a.puts)/w), append(txns, float64(a.txns)/w)
		evs = append(evs, float64(a.events)/w)
		bout, bin = append(bout, float64(a.bytesOut)/w), append(bin, float64(a.bytesIn)/w)
	}
	sum.AgentTickUs, sum.AgentCPUPerTickUs = dist(ticks), dist(cpuPer)
	sum.AgentPutsPerS, sum.AgentTxnsPerS, sum.AgentEventsPerS = dist(puts), dist(txns), dist(evs)
	sum.AgentBytesOutPerS, sum.AgentBytesInPerS = dist(bout), dist(bin)
	sum.ResourcesPerAgent, sum.ResourcesLed, sum.LeaderlessAtKill = dist(nres), dist(s.ledAtKill), s.leaderlessAtKill
	sum.Handovers, sum.HandoversInWindow = s.handovers, s.handoversWin
	if s.handovers > 0 {
		sum.LastHandoverMs = report.Round(ms(s.lastHandover-s.firstStart()), 1)
	}
}

// etcdSummary: etcd's load over the rate window w (seconds).
func (s *clusterSim) etcdSummary(sum *ClusterScaleSummary, w float64) {
	sum.EtcdPutsPerS = report.Round(float64(s.puts)/w, 1)
	sum.EtcdTxnsPerS = report.Round(float64(s.writes)/w, 1)
	sum.EtcdRevisionsPerS = sum.EtcdTxnsPerS
	sum.EtcdKeepAlivesPerS = report.Round(float64(s.keepalives)/w, 1)
	sum.EtcdReadsPerS = report.Round(float64(s.reads)/w, 1)
	sum.EtcdEventsPerS = report.Round(float64(s.events)/w, 1)
	sum.EtcdBytesInPerS = report.Round(float64(s.bytesIn)/w, 0)
	sum.EtcdBytesOutPerS = report.Round(float64(s.bytesOut)/w, 0)
	sum.EtcdKeys, sum.EtcdLeases = s.keysAtEnd, s.leasesAtEnd
	sum.EtcdUtilisation = report.Round(s.busy.Seconds()/w, 3)
	sum.EtcdCommitMs, sum.EtcdBatch = dist(s.commitMs), dist(s.batchN)
}

// deathSummary: the killed leader's followers, per resource.
func (s *clusterSim) deathSummary(sum *ClusterScaleSummary) {
	o := s.o
	sum.Killed, sum.KilledLed = s.killed.id, s.killedLed
	var fall, since, over []float64
	for _, r := range s.res {
		var worst time.Duration = -1
		watched, done := false, true
		for _, sl := range r.slots {
			m := sl.deathMode
			if !m.watch || sl.a.dead {
				continue
			}
			watched = true
			if m.fellAt >= 0 {
				fall = append(fall, ms(m.fellAt-o.KillAt))
				since = append(since, ms(m.fellAt-m.lastRecAt))
			}
			if m.rejoinAt < 0 {
				done = false
			} else {
				worst = max(worst, m.rejoinAt-o.KillAt)
			}
		}
		if !watched {
			continue
		}
		if done && worst >= 0 {
			over = append(over, ms(worst))
		} else {
			sum.FailoverIncomplete++
		}
	}
	sum.FallbackMs, sum.FallbackSinceRecMs, sum.FailoverMs = dist(fall), dist(since), dist(over)
}

// outageSummary: every living agent's resources after etcd was lost.
func (s *clusterSim) outageSummary(sum *ClusterScaleSummary) {
	var fall, decay []float64
	for _, a := range s.agents {
		if a.dead {
			continue
		}
		for _, sl := range a.slots {
			m := sl.outageMode
			if !m.watch {
				continue
			}
			if m.fellAt >= 0 {
				fall = append(fall, ms(m.fellAt-s.o.OutageAt))
			}
			if m.decayedAt < 0 {
				sum.OutageNotDecayed++
				continue
			}
			if m.residue <= 0 {
				sum.OutageNothingToDecay++
				continue
			}
			decay = append(decay, ms(m.decayedAt-m.fellAt))
			if m.aboveLoc {
				sum.OutageStepAboveLocal++
			}
		}
	}
	sum.OutageFallbackMs, sum.OutageDecayMs = dist(fall), dist(decay)
}

// paper derives the steady-state load from the sizes and the cluster's
// timing, beside the model's counts.
func (s *clusterSim) paper(sum *ClusterScaleSummary) []Estimate {
	o := s.o
	A, R, S := float64(o.Agents), float64(o.Resources), float64(o.Spread)
	perAgent := R * S / A // resources per agent
	tick := Interval.Seconds()
	pub := 1 / o.PublishEvery.Seconds()
	// A steady shared step is republished once Fresh/3 has passed, on the
	// tick after: every ceil(Fresh/3 / tick) ticks; a moving one every tick.
	steady := 1 / (math.Ceil((o.Fresh/3).Seconds()/tick-1e-9) * tick)
	moving := 1 / tick
	// A publisher round is one request (more past MaxTxnOps operations)
	// with the records and the indicators due: a round every publish_every
	// carries both when the leader's tick woke it, else the records of a
	// tick go alone and the indicators in the ticker's round.
	chunks := math.Ceil((perAgent + R/A) / float64(cluster.MaxTxnOps))
	keep := A / (float64(o.TTL) / 3)
	w := s.window().Seconds()
	e := []Estimate{
		{"indicator puts/s", "agents × resources per agent × 1/publish_every", A * perAgent * pub, A * perAgent * pub, float64(s.putsKind[kindIndicator]) / w},
		{"shared-record puts/s", "resources × [1/(ticks per Fresh/3), 1/tick]", R * steady, R * moving, float64(s.putsKind[kindDelay]) / w},
		{"etcd puts/s", "indicator puts + record puts", A*perAgent*pub + R*steady, A*perAgent*pub + R*moving, sum.EtcdPutsPerS},
		{"etcd write requests/s", "agents × ceil((resources per agent + resources led) / 100) × [1/publish_every, 1/publish_every + 1/tick]", A * chunks * pub, A * chunks * (pub + moving), sum.EtcdTxnsPerS},
		{"lease keepalives/s", "agents / (TTL/3)", keep, keep, sum.EtcdKeepAlivesPerS},
		{"watch events/s", "indicator puts (1 watcher: the leader) + record puts × spread", A*perAgent*pub + R*steady*S, A*perAgent*pub + R*moving*S, sum.EtcdEventsPerS},
		{"puts/s per agent", "resources per agent × 1/publish_every + resources led × record rate", perAgent*pub + R/A*steady, perAgent*pub + R/A*moving, sum.AgentPutsPerS.Mean},
		{"watch events/s per agent", "resources per agent × record rate + resources led × spread × 1/publish_every", perAgent*steady + R/A*S*pub, perAgent*moving + R/A*S*pub, sum.AgentEventsPerS.Mean},
		{"etcd keys", "agents × resources per agent (indicators) + resources (delays) + resources × spread (candidates) + 1", A*perAgent + R + R*S + 1, A*perAgent + R + R*S + 1, float64(sum.EtcdKeys)},
		{"etcd leases", "agents", A, A, float64(sum.EtcdLeases)},
	}
	for i := range e {
		e[i].PaperLow, e[i].PaperHigh = report.Round(e[i].PaperLow, 1), report.Round(e[i].PaperHigh, 1)
		e[i].Model = report.Round(e[i].Model, 1)
	}
	return e
}
