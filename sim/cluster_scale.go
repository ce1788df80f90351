package sim

// The cluster-scale scenario (issue 22, item 6): many agents sharing one
// policy and one controller per resource through etcd, at a size no test
// can start (100 agents, 1,000 resources, 10,000 consumers), on virtual
// time. What runs is package cluster's own per-tick code — Follower.Step,
// Leader.Step (aggregate, preset, the shared PID, the republish rule), the
// indicator and record encodings, ValidatePolicy and Merge — and
// agent.NewPID for the local and the shared controllers. What is modelled
// is everything around it: etcd (one linearizable store with client
// latency, group commit, an apply cost, watches and leases), the
// goroutines of cluster.Node that carry records between that code and
// etcd (its publisher, watches, campaigns and session), and the back end
// each resource's agents measure. The model of Node's goroutines follows
// node.go step by step; where it simplifies, the comment says so.
//
// Like the rest of package sim it reads no wall clock inside the model:
// virtual-time figures are the same for a seed. The CPU figures are the
// exception, by design: they time the real per-agent code on this
// machine.

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/control"
	"github.com/sanqos/sanqos/report"
)

// EtcdModel is the modelled etcd cluster, seen from its clients.
//
// Defaults follow etcd's own performance guide (op-guide/performance):
// the least time for a request is the round trip between members plus
// the WAL's fdatasync; a round trip inside a data centre is up to several
// hundred µs, an SSD's fdatasync often under 1 ms, and a three-member
// cluster "finishes a request in less than one millisecond under light
// load, and can complete more than 30,000 requests per second under heavy
// load". So: 0.5 ms one way between an agent and etcd (a 1 ms round trip,
// on the slow side of a LAN), a 2 ms commit (a member round trip and an
// fdatasync, with a lognormal tail: p99 ≈ 6 ms, under the 10 ms WAL fsync
// p99 etcd's hardware guide asks for), and 33 µs of server time per
// request, i.e. 30,000 requests/s at full load.
type EtcdModel struct {
	// OneWay is the median client↔server latency, each way; OneWaySigma
	// the lognormal spread around it.
	OneWay      time.Duration `json:"one_way_median_ns"`
	OneWaySigma float64       `json:"one_way_sigma"`
	// Commit is the median time to commit a batch of writes (member round
	// trip + WAL fdatasync). Writes that arrive while a batch commits go
	// in the next one, as etcd's raft loop batches proposals.
	Commit      time.Duration `json:"commit_median_ns"`
	CommitSigma float64       `json:"commit_sigma"`
	// ApplyCost is the server time per committed request (the apply loop
	// is serial): its inverse is the capacity.
	ApplyCost time.Duration `json:"apply_cost_ns"`
	// ReadIndex is the extra time of a linearizable read (a heartbeat
	// round between members).
	ReadIndex time.Duration `json:"read_index_ns"`
	// LeaseCheck is how often the lessor looks for expired leases (etcd:
	// every 500 ms), whose revocation then goes through Raft.
	LeaseCheck time.Duration `json:"lease_check_ns"`
}

// DefaultEtcd is the model above.
func DefaultEtcd() EtcdModel {
	return EtcdModel{OneWay: 500 * time.Microsecond, OneWaySigma: 0.5, Commit: 2 * time.Millisecond, CommitSigma: 0.5,
		ApplyCost: 33 * time.Microsecond, ReadIndex: 500 * time.Microsecond, LeaseCheck: 500 * time.Millisecond}
}

// ClusterScaleOptions size the cluster-scale scenario.
type ClusterScaleOptions struct {
	Agents    int `json:"agents"`
	Resources int `json:"resources"`
	Consumers int `json:"consumers"`
	// Spread is how many agents serve each resource (the target hosts
	// in front of it); a resource's consumers are dealt among them.
	Spread    int           `json:"spread"`
	Length    time.Duration `json:"length_ns"`
	Seed      uint64        `json:"seed"`
	Threshold time.Duration `json:"threshold_ns"`
	Etcd      EtcdModel     `json:"etcd"`
	// Rates are counted over [Warmup, KillAt) (the cluster formed, no
	// failure yet).
	Warmup time.Duration `json:"warmup_ns"`
	// Policies policy changes are put every PolicyEvery from PolicyFrom.
	Policies    int           `json:"policies"`
	PolicyFrom  time.Duration `json:"policy_from_ns"`
	PolicyEvery time.Duration `json:"policy_every_ns"`
	// KillAt: the agent leading the most resources dies (0: never).
	// OutageAt: etcd stops answering for the rest of the run (0: never).
	KillAt   time.Duration `json:"kill_at_ns"`
	OutageAt time.Duration `json:"outage_at_ns"`
	// The cluster's timing (cluster.Config; defaults: package cluster's).
	TTL          int           `json:"ttl_s"`
	Fresh        time.Duration `json:"fresh_ns"`
	Decay        time.Duration `json:"decay_ns"`
	Blend        time.Duration `json:"blend_ns"`
	PublishEvery time.Duration `json:"publish_every_ns"`
	// BalanceEvery and BalanceHold: the leaders' balancing (negative
	// BalanceEvery: none, the first to campaign keeps what it wins).
	BalanceEvery time.Duration `json:"balance_every_ns"`
	BalanceHold  time.Duration `json:"balance_hold_ns"`
}

// DefaultClusterScale is the size: 100 agents, 1,000 resources
// each behind 3 of them, 10,000 consumers; five policy changes, the
// busiest leader killed at 20 s, etcd lost at 30 s, 36 s in all (the
// last Decay fits).
func DefaultClusterScale() ClusterScaleOptions {
	return ClusterScaleOptions{Agents: 100, Resources: 1000, Consumers: 10000, Spread: 3, Length: 36 * time.Second, Seed: 1,
		Threshold: 15 * time.Millisecond, Etcd: DefaultEtcd(), Warmup: 3 * time.Second,
		Policies: 5, PolicyFrom: 5 * time.Second, PolicyEvery: 3 * time.Second, KillAt: 20 * time.Second, OutageAt: 30 * time.Second,
		TTL: cluster.DefaultTTL, Fresh: cluster.DefaultFresh, Decay: cluster.DefaultDecay, Blend: cluster.DefaultBlend,
		PublishEvery: cluster.DefaultPublishEvery, BalanceEvery: cluster.DefaultBalanceEvery, BalanceHold: cluster.DefaultBalanceHold}
}

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

// RunClusterScale runs the scenario.
func RunClusterScale(o ClusterScaleOptions) (*ClusterScaleSummary, error) {
	s, err := newClusterSim(o)
	if err != nil {
		return nil, err
	}
	s.run()
	return s.summary(), nil
}

// ---- the event queue ----

type csEvent struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type csQueue []csEvent

func (q csQueue) Len() int { return len(q) }
func (q csQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q csQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *csQueue) Push(x any)   { *q = append(*q, x.(csEvent)) }
func (q *csQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = csEvent{}
	*q = old[:len(old)-1]
	return e
}

// ---- the model's state ----

type csKind uint8

const (
	kindIndicator csKind = iota
	kindDelay
	kindElection
	kindPolicy
)

// csKV is one key in the modelled store; kind, res and agent say what it
// is, so fan-out needs no key parsing.
type csKV struct {
	key         string
	val         []byte
	create, mod int64
	lease       *csLease
	kind        csKind
	res         *csRes
	agent       string
	cand        *csSlot // election key: its candidate
	delWatchers []csWaiter
}

// csWaiter is a campaign waiting for a key's deletion: campaign gen of
// its slot (a requeue starts a new one, and the old wait is void).
type csWaiter struct {
	sl  *csSlot
	gen int
}

type csLease struct {
	id      int64
	expiry  time.Duration
	revoked bool
	keys    []*csKV // attached, in order (for a deterministic revoke)
	has     map[*csKV]bool
}

// csPut is one put of a write request. A fenced put is a nested
// transaction: put only while fence's election key stands (the leader's
// record, see Node.publishOnce); landed, if set, runs when it does.
type csPut struct {
	key    string
	val    []byte
	kind   csKind
	res    *csRes
	agent  string
	cand   *csSlot
	fence  *csSlot
	elec   *csKV
	landed func()
}

// csReq is one write request (a transaction, a grant, a revoke).
type csReq struct {
	from   *csAgent // nil: the operator or etcd itself
	puts   []csPut
	lease  *csLease // the puts' lease
	absent bool     // put only if the (one) key is absent (a campaign)
	apply  func(rev int64, at time.Duration)
	done   func(ok bool)
	sentAt time.Duration
	// ok[i]: puts[i] was written (its fence held), for done.
	ok []bool
}

type csRes struct {
	idx        int
	name       string
	slots      []*csSlot
	writer     *csSlot // the slot serving the resource's writer
	writerOn   [2]time.Duration
	excessMs   float64
	cands      []*csSlot // election candidates by create revision
	delayKV    *csKV
	delayWatch []*csSlot
	agentWatch []*csSlot // leaders watching the agents' prefix
	tracks     []*csTrack
}

// csTrack follows one published record until every agent serving its
// resource has applied it (or a later one).
type csTrack struct {
	seq  uint64
	made time.Duration
	need int
	max  time.Duration
}

type csSlot struct {
	a       *csAgent
	res     *csRes
	local   agent.Controller
	f       cluster.Follower
	lead    cluster.Leader
	leading bool
	since   time.Time // leading since
	looked  time.Time // the balancer last read the election
	yield   cluster.Candidate
	// campaign in progress (gen counts campaigns, so a requeued one's
	// waits are void); yielded: the last yield acted on (Node.apply).
	campaigning bool
	campGen     int
	yielded     int64
	agents      map[string]cluster.Indicator
	heard       map[string]time.Time // indicators' live arrivals
	readers     []cluster.Consumer
	writer      *cluster.Consumer
	ind         cluster.Indicator
	indTime     time.Time
	dirty       bool
	lastPub     time.Time
	pending     *cluster.Shared
	elec        *csKV
	inCl        bool
	counted     uint64
	applied     int
	localOut    int
	// failure bookkeeping
	deathMode  csFailure
	outageMode csFailure
}

// csFailure records a follower's first ticks after a failure.
type csFailure struct {
	watch     bool
	fellAt    time.Duration
	lastRecAt time.Duration
	rejoinAt  time.Duration
	decayedAt time.Duration
	residue   float64 // the shared step it followed when it fell back
	aboveLoc  bool
}

type csAgent struct {
	idx      int
	id       string
	start    time.Duration
	slots    []*csSlot
	dead     bool
	ticked   bool
	lease    *csLease
	session  bool
	own      []byte // its own config file
	cfg      *config.Config
	pubBusy  bool
	pubAgain bool
	kick     bool
	// policy: change index → delivered at; in-effect pending
	effect []int
	// accounting (rate window)
	ticks                       int
	tickNs, pubNs, recvNs       int64
	puts, txns, events          int
	bytesOut, bytesIn           int64
	tickUs                      []float64
	policyCPU                   []float64
	appliedPolicy, effectAt     map[int]time.Duration
	appliedRev                  int64
	keepaliveEvery, pubPhaseOff time.Duration
}

type clusterSim struct {
	o      ClusterScaleOptions
	t      cluster.Timing
	rng    *rand.Rand
	q      csQueue
	seq    uint64
	now    time.Duration
	epoch  time.Time
	agents []*csAgent
	res    []*csRes
	prefix string

	// etcd
	rev        int64
	kv         map[string]*csKV
	leases     []*csLease
	nextLease  int64
	batch      []*csReq
	committing bool
	applyFree  time.Duration
	down       bool
	policyKV   *csKV
	policyW    []*csAgent

	// policies
	policyDocs [][]byte
	policyPut  []time.Duration
	policyRev  []int64

	// accounting (rate window)
	puts, writes, keepalives, reads, events int
	putsKind                                [4]int
	bytesIn, bytesOut                       int64
	busy                                    time.Duration
	commitMs, batchN                        []float64
	sharedProp, sharedDeliv                 []float64
	recordsDone                             int
	inCluster, slotsTotal                   int
	formedAt                                time.Duration
	killed                                  *csAgent
	killedLed                               int
	ledAtKill                               []float64
	leaderlessAtKill                        int
	keysAtEnd, leasesAtEnd                  int
	spurious                                int
	events0                                 uint64
	handovers, handoversWin                 int
	lastHandover                            time.Duration
}

func (s *clusterSim) inWindow() bool {
	end := s.o.Length
	if s.o.KillAt > 0 {
		end = s.o.KillAt
	}
	return s.now >= s.o.Warmup && s.now < end
}

func (s *clusterSim) window() time.Duration {
	end := s.o.Length
	if s.o.KillAt > 0 {
		end = s.o.KillAt
	}
	return end - s.o.Warmup
}

func (s *clusterSim) at(d time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.q, csEvent{at: s.now + d, seq: s.seq, fn: fn})
}

func (s *clusterSim) clock() time.Time { return s.epoch.Add(s.now) }

// tailCap bounds the modelled latencies at this many medians (a request
// slower than that is, for an agent, a lost one: its context times out).
const tailCap = 10

func (s *clusterSim) lognormal(median time.Duration, sigma float64) time.Duration {
	d := float64(median) * math.Exp(sigma*s.rng.NormFloat64())
	return time.Duration(min(d, tailCap*float64(median)))
}

// WatchBound is the longest a write can take, from the client's send to
// a watcher's receipt, when etcd is not saturated: one way in, waiting
// out the commit in progress, its own commit, applying up to 100
// requests ahead of it, one way out — each latency at its cap.
func (e EtcdModel) WatchBound() time.Duration {
	return 2*tailCap*e.OneWay + 2*tailCap*e.Commit + 100*e.ApplyCost
}

func (s *clusterSim) oneWay() time.Duration {
	return s.lognormal(s.o.Etcd.OneWay, s.o.Etcd.OneWaySigma)
}

// ---- setup ----

func newClusterSim(o ClusterScaleOptions) (*clusterSim, error) {
	if o.Agents < o.Spread || o.Spread < 1 || o.Resources < 1 || o.Consumers < o.Resources {
		return nil, fmt.Errorf("cluster-scale: want spread ≥ 1, agents ≥ spread, consumers ≥ resources ≥ 1 (have %d agents, spread %d, %d resources, %d consumers)",
			o.Agents, o.Spread, o.Resources, o.Consumers)
	}
	s := &clusterSim{o: o, t: cluster.Timing{Fresh: o.Fresh, Decay: o.Decay, Blend: o.Blend},
		rng: rand.New(rand.NewPCG(o.Seed, 22)), epoch: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		prefix: cluster.DefaultPrefix, kv: map[string]*csKV{}, nextLease: 0x694d7a1c2b3e0000, formedAt: -1}
	for i := range o.Agents {
		a := &csAgent{idx: i, id: fmt.Sprintf("host%03d", i), appliedPolicy: map[int]time.Duration{}, effectAt: map[int]time.Duration{}}
		// Agents start within half a second of each other, at no
		// common phase: their ticks and publishers are not aligned.
		a.start = time.Duration(s.rng.Int64N(int64(500 * time.Millisecond)))
		a.pubPhaseOff = time.Duration(s.rng.Int64N(int64(o.PublishEvery)))
		s.agents = append(s.agents, a)
	}
	// Resource r is behind agents r, r+stride, r+2·stride, … (mod the
	// agents), stride spreading each resource's agents over the fleet;
	// its consumers are dealt round-robin among them, the last one being
	// the resource's writer.
	stride := max(1, o.Agents/o.Spread)
	per, extra := o.Consumers/o.Resources, o.Consumers%o.Resources
	ci := 0
	for r := range o.Resources {
		res := &csRes{idx: r, name: fmt.Sprintf("r%04d", r), excessMs: 20 + 20*s.rng.Float64()}
		// The writer starts in the first half of the run; on odd resources
		// it stops 5-15 s later, so shared steps rise, hold and fall, and on
		// even ones it writes to the end, so a lost cluster leaves shared
		// steps to decay.
		on := time.Duration(s.rng.Int64N(int64(o.Length/2))) + time.Second
		off := on + 5*time.Second + time.Duration(s.rng.Int64N(int64(10*time.Second)))
		if r%2 == 0 {
			off = o.Length + time.Second
		}
		res.writerOn = [2]time.Duration{on, off}
		seen := map[int]bool{}
		for k := range o.Spread {
			ai := (r + k*stride) % o.Agents
			for seen[ai] {
				ai = (ai + 1) % o.Agents
			}
			seen[ai] = true
			a := s.agents[ai]
			sl := &csSlot{a: a, res: res, agents: map[string]cluster.Indicator{}, heard: map[string]time.Time{}, f: cluster.Follower{Mode: cluster.ModeLocal}}
			a.slots = append(a.slots, sl)
			res.slots = append(res.slots, sl)
		}
		n := per
		if r < extra {
			n++
		}
		for c := range n {
			sl := res.slots[c%len(res.slots)]
			addr := scaleAddr(ci)
			ci++
			if c == n-1 {
				sl.writer = &cluster.Consumer{Addr: addr, Throttleable: true, WriteBps: 8e6}
				res.writer = sl
				continue
			}
			sl.readers = append(sl.readers, cluster.Consumer{Addr: addr, ReadBps: 64 << 10})
		}
		s.res = append(s.res, res)
		s.slotsTotal += len(res.slots)
	}
	// Each agent's own config names the resources it serves; the policy
	// sets the thresholds of all of them (the whole SAN's).
	for _, a := range s.agents {
		sort.Slice(a.slots, func(i, k int) bool { return a.slots[i].res.idx < a.slots[k].res.idx })
		var b strings.Builder
		b.WriteString("backend: dry-run\ndiscovery:\n  source: tgt\nresources:\n")
		for _, sl := range a.slots {
			fmt.Fprintf(&b, "  - name: %s\n", sl.res.name)
		}
		a.own = []byte(b.String())
		cfg, err := config.Parse(a.own)
		if err != nil {
			return nil, err
		}
		a.cfg = cfg
		for _, sl := range a.slots {
			ctrl, err := sharedPID(cfg, sl.res.name)
			if err != nil {
				return nil, err
			}
			sl.local = ctrl
		}
	}
	for k := 0; k <= o.Policies; k++ {
		var b strings.Builder
		th := o.Threshold + time.Duration(k%2)*time.Millisecond
		fmt.Fprintf(&b, "threshold: %v\nresources:\n", th)
		for _, r := range s.res {
			fmt.Fprintf(&b, "  - name: %s\n    threshold: %v\n", r.name, th)
		}
		doc := []byte(b.String())
		if _, err := cluster.ValidatePolicy(doc); err != nil {
			return nil, err
		}
		s.policyDocs = append(s.policyDocs, doc)
	}
	return s, nil
}

// sharedPID is cmd/sanqos's clusterRun.sharedPID: the agent's own PID
// for the resource, with the config in force.
func sharedPID(cfg *config.Config, res string) (control.Controller, error) {
	for _, r := range cfg.Resources {
		if r.Name == res {
			if p, ok := agent.NewPID(cfg, r).(control.Controller); ok {
				return p, nil
			}
			return nil, fmt.Errorf("resource %s: not a control.Controller", res)
		}
	}
	return nil, fmt.Errorf("resource %s is not in this agent's config", res)
}

// ---- running ----

func (s *clusterSim) run() {
	// The initial policy is in etcd before any agent starts.
	s.rev++
	s.policyKV = &csKV{key: cluster.PolicyKey(s.prefix), val: s.policyDocs[0], create: s.rev, mod: s.rev, kind: kindPolicy}
	s.kv[s.policyKV.key] = s.policyKV
	s.policyRev = append(s.policyRev, s.rev)
	s.policyPut = append(s.policyPut, 0)
	for _, a := range s.agents {
		s.at(a.start, func() { s.startAgent(a) })
	}
	s.at(s.o.Etcd.LeaseCheck, s.leaseCheck)
	for k := 1; k <= s.o.Policies; k++ {
		s.at(s.o.PolicyFrom+time.Duration(k-1)*s.o.PolicyEvery, func() { s.putPolicy(k) })
	}
	s.at(s.o.Warmup+s.window(), s.snapshot)
	if s.o.KillAt > 0 {
		s.at(s.o.KillAt, s.kill)
	}
	if s.o.OutageAt > 0 {
		s.at(s.o.OutageAt, s.outage)
	}
	for len(s.q) > 0 {
		e := heap.Pop(&s.q).(csEvent)
		if e.at > s.o.Length {
			break
		}
		s.now = e.at
		s.events0++
		e.fn()
	}
}

// startAgent is the agent process starting: its Node grants a lease (the
// session), its policy watch reads the policy, and its resource loops
// start ticking.
func (s *clusterSim) startAgent(a *csAgent) {
	s.watchPolicy(a)
	s.write(&csReq{from: a, apply: func(rev int64, at time.Duration) {
		s.nextLease++
		a.lease = &csLease{id: s.nextLease, expiry: at + time.Duration(s.o.TTL)*time.Second, has: map[*csKV]bool{}}
		s.leases = append(s.leases, a.lease)
	}, done: func(ok bool) {
		if !ok || a.dead {
			return
		}
		s.sessionUp(a)
	}}, time.Second)
	s.tick(a)
	s.at(a.pubPhaseOff, func() { s.publisherTick(a) })
	if s.o.BalanceEvery > 0 {
		s.at(s.balancePace(), func() { s.balancer(a) })
	}
}

func (s *clusterSim) sessionUp(a *csAgent) {
	a.session = true
	if a.ticked {
		for _, sl := range a.slots {
			s.campaign(sl)
		}
	}
	for _, sl := range a.slots {
		if !sl.indTime.IsZero() {
			sl.dirty = true
		}
	}
	// clientv3 renews a lease every TTL/3.
	a.keepaliveEvery = time.Duration(s.o.TTL) * time.Second / 3
	s.at(a.keepaliveEvery, func() { s.keepalive(a) })
	s.publish(a)
}

func (s *clusterSim) keepalive(a *csAgent) {
	if a.dead {
		return
	}
	if s.inWindow() {
		s.keepalives++
	}
	l := a.lease
	d := s.oneWay()
	s.at(d, func() {
		if !s.down && !l.revoked {
			l.expiry = s.now + time.Duration(s.o.TTL)*time.Second
		}
	})
	s.at(a.keepaliveEvery, func() { s.keepalive(a) })
}

func (s *clusterSim) publisherTick(a *csAgent) {
	if a.dead {
		return
	}
	s.publish(a)
	s.at(s.o.PublishEvery, func() { s.publisherTick(a) })
}

// measure is what the agent's indicator reads on a resource: the back
// end's read wait — 2 ms, plus the writer's excess while it writes,
// removed in proportion to the step its agent applies to it (20 steps,
// 10 ms, tame it) — with 5 % noise per agent.
func (s *clusterSim) measure(sl *csSlot) float64 {
	r := sl.res
	w := 2.0
	if s.writerOn(r) {
		w += r.excessMs * max(0, 1-float64(r.writer.applied)/20)
	}
	return w * (1 + 0.05*s.rng.NormFloat64())
}

func (s *clusterSim) writerOn(r *csRes) bool {
	return s.now >= r.writerOn[0] && s.now < r.writerOn[1]
}

// tick is one control interval of an agent: each resource loop runs its
// local PID and goes through the seam (cluster.Controller: Publish, then
// Delay), as in the daemon.
func (s *clusterSim) tick(a *csAgent) {
	if a.dead {
		return
	}
	now := s.clock()
	first := !a.ticked
	a.ticked = true
	waits := make([]float64, len(a.slots))
	for i, sl := range a.slots {
		waits[i] = s.measure(sl)
	}
	t0 := time.Now()
	for i, sl := range a.slots {
		step := sl.local.Update(waits[i])
		// cluster.Details: the resource's traffic and the consumers with
		// any, the writer throttleable while it writes.
		ind := cluster.Indicator{Consumers: make([]cluster.Consumer, 0, len(sl.readers)+1)}
		for _, c := range sl.readers {
			ind.ReadBps += c.ReadBps
			ind.Consumers = append(ind.Consumers, c)
		}
		if sl.writer != nil && s.writerOn(sl.res) {
			ind.WriteBps += sl.writer.WriteBps
			ind.Consumers = append(ind.Consumers, *sl.writer)
		}
		ind.WaitMs, ind.LocalStep = waits[i], step
		// Node.Publish
		sl.ind, sl.indTime, sl.dirty = ind, now, true
		// Node.Delay
		if sl.leading {
			s.lead(sl, now)
		}
		sl.applied, _ = sl.f.Step(s.t, step, now)
		sl.localOut = step
	}
	dt := time.Since(t0)
	if s.inWindow() {
		a.ticks++
		a.tickNs += int64(dt)
		a.tickUs = append(a.tickUs, float64(dt)/1e3)
	}
	if first {
		for _, sl := range a.slots {
			s.watchDelay(sl)
			if a.session {
				s.campaign(sl)
			}
		}
	}
	for k := range a.effect {
		s.policyInEffect(a, a.effect[k])
	}
	a.effect = a.effect[:0]
	s.afterTick(a)
	if a.kick {
		a.kick = false
		s.publish(a)
	}
	s.at(Interval, func() { s.tick(a) })
}

// lead is Node.lead: rebuild the controller after a renewal, one
// Leader.Step, queue the record, follow it at once (Follower.Own) and
// wake the publisher.
func (s *clusterSim) lead(sl *csSlot, now time.Time) {
	if !sl.lead.HasController() {
		ctrl, err := sharedPID(sl.a.cfg, sl.res.name)
		if err != nil {
			return
		}
		sl.lead.Renewed(ctrl)
	}
	l := sl.lead.Step(sl.a.id, sl.ind, sl.agents, &sl.f, s.t, control.DefaultStep, now)
	if l.Rec != nil {
		l.Rec.Yield, l.Rec.YieldRev = sl.yield.ID, sl.yield.Rev
		sl.pending = l.Rec
		sl.f.Own(*l.Rec)
		sl.a.kick = true
	}
}

// afterTick is the model's bookkeeping of a tick (not the agent's work):
// propagation of records, cluster formation, failure measurements.
func (s *clusterSim) afterTick(a *csAgent) {
	for _, sl := range a.slots {
		inCl := sl.f.Mode == cluster.ModeCluster
		if inCl != sl.inCl {
			if inCl {
				s.inCluster++
			} else {
				s.inCluster--
				if s.inWindow() {
					s.spurious++
				}
			}
			sl.inCl = inCl
		}
		if inCl && sl.f.Shared.Seq > sl.counted {
			r := sl.res
			kept := r.tracks[:0]
			for _, tr := range r.tracks {
				if tr.seq > sl.counted && tr.seq <= sl.f.Shared.Seq {
					tr.need--
					tr.max = max(tr.max, s.now-tr.made)
				}
				if tr.need <= 0 {
					s.recordsDone++
					s.sharedProp = append(s.sharedProp, ms(tr.max))
					continue
				}
				kept = append(kept, tr)
			}
			r.tracks = kept
			sl.counted = sl.f.Shared.Seq
		}
		s.failureTick(sl)
	}
	if s.formedAt < 0 && s.inCluster == s.slotsTotal {
		s.formedAt = s.now
	}
}

// ---- Node's publisher ----

// publish is Node.publishOnce run by Node.publisher: the leader's records
// (each a nested transaction fenced by its election key) and the dirty
// indicators (stamped with the agent's leadership load), together in
// transactions of MaxTxnOps, all sent at once; the round ends when every
// one is answered (or Fresh). A record that landed is confirmed to its
// leader (Follower.Confirm).
func (s *clusterSim) publish(a *csAgent) {
	if a.dead || !a.session {
		return
	}
	if a.pubBusy {
		a.pubAgain = true // the kick or tick channel holds one more
		return
	}
	now := s.clock()
	t0 := time.Now()
	leads, share := s.load(a)
	var puts []csPut
	var slots []*csSlot
	var recs []*cluster.Shared
	for _, sl := range a.slots {
		if sl.pending != nil && sl.leading {
			b, _ := cluster.EncodeShared(sl.pending)
			rec := sl.pending
			r := sl.res
			puts = append(puts, csPut{key: cluster.DelayKey(s.prefix, sl.res.name), val: b, kind: kindDelay, res: sl.res,
				fence: sl, elec: sl.elec, landed: func() { s.trackRecord(r, rec) }})
			slots, recs = append(slots, sl), append(recs, rec)
			sl.pending = nil
		}
		if sl.dirty && now.Sub(sl.lastPub) >= s.o.PublishEvery {
			ind := sl.ind
			ind.Leads, ind.Share = leads, share
			b, _ := cluster.EncodeIndicator(ind, sl.indTime)
			puts = append(puts, csPut{key: cluster.AgentKey(s.prefix, sl.res.name, a.id), val: b, kind: kindIndicator, res: sl.res, agent: a.id})
			slots, recs = append(slots, sl), append(recs, nil)
			sl.dirty, sl.lastPub = false, now
		}
	}
	if s.inWindow() {
		a.pubNs += int64(time.Since(t0))
	}
	if len(puts) == 0 {
		return
	}
	a.pubBusy = true
	left := 0
	for len(puts) > 0 {
		k := min(len(puts), cluster.MaxTxnOps)
		req := &csReq{from: a, lease: a.lease, puts: puts[:k]}
		cs, rs := slots[:k], recs[:k]
		req.done = func(ok bool) {
			at := s.clock()
			for i, sl := range cs {
				switch {
				case rs[i] == nil:
					if !ok {
						sl.dirty = true
					}
				case ok && req.ok[i] && sl.leading && sl.elec == req.puts[i].elec:
					sl.f.Confirm(*rs[i], at)
				}
			}
			left--
			if left == 0 {
				s.publishDone(a)
			}
		}
		left++
		s.write(req, s.o.Fresh)
		puts, slots, recs = puts[k:], slots[k:], recs[k:]
	}
}

func (s *clusterSim) publishDone(a *csAgent) {
	a.pubBusy = false
	if a.pubAgain && !a.dead {
		a.pubAgain = false
		s.publish(a)
	}
}

// load is Node.load: resources led, and the fair share (ShareOf over
// every resource served, as this agent knows them: Seen).
func (s *clusterSim) load(a *csAgent) (leads int, share float64) {
	for _, sl := range a.slots {
		if sl.leading {
			leads++
		}
		share += cluster.ShareOf(cluster.Seen(sl.leading, a.id, sl.agents, &sl.f))
	}
	return leads, share
}

// ---- Node's balancer ----

// balancePace is the balancer's jittered period (±25 %).
func (s *clusterSim) balancePace() time.Duration {
	d := s.o.BalanceEvery
	return d*3/4 + time.Duration(s.rng.Int64N(int64(d/2)+1))
}

func (s *clusterSim) balancer(a *csAgent) {
	if a.dead {
		return
	}
	s.balance(a)
	s.at(s.balancePace(), func() { s.balancer(a) })
}

// balance is Node.balance: of the resources this agent has led for
// BalanceHold where HandOver allows some live agent (heard within Fresh),
// the four whose election it read least recently, one after the other:
// read the election line and apply cluster.Balance — hand the resource
// over to the next in line if it is such an agent (each move counting at
// once in both loads), else, if one stands further back, have the
// leader's records ask the next in line to step back (requeue).
func (s *clusterSim) balance(a *csAgent) {
	if !a.session {
		return
	}
	now := s.clock()
	leads, share := s.load(a)
	var cands []*csSlot
	for _, sl := range a.slots {
		if !sl.leading || now.Sub(sl.since) < s.o.BalanceHold {
			continue
		}
		if cluster.AnyLighter(a.id, leads, share, sl.agents, cluster.LiveLoads(sl.agents, sl.heard, nil, s.o.Fresh, now)) {
			cands = append(cands, sl)
		} else {
			sl.yield = cluster.Candidate{}
		}
	}
	sort.SliceStable(cands, func(i, k int) bool { return cands[i].looked.Before(cands[k].looked) })
	cands = cands[:min(len(cands), 4)]
	for _, sl := range cands {
		sl.looked = now
	}
	given := map[string]int{}
	var try func(k int)
	try = func(k int) {
		if k >= len(cands) || a.dead {
			return
		}
		sl := cands[k]
		elec := sl.elec
		s.read(a, func() func() {
			r := sl.res
			if len(r.cands) < 2 || r.cands[0] != sl || r.cands[0].elec != elec {
				return func() { try(k + 1) }
			}
			line := make([]cluster.Candidate, len(r.cands))
			for i, c := range r.cands {
				line[i] = cluster.Candidate{ID: c.a.id, Rev: c.elec.create}
			}
			return func() {
				if !sl.leading || sl.elec != elec {
					try(k + 1)
					return
				}
				next, yield := cluster.Balance(leads, share, line, cluster.LiveLoads(sl.agents, sl.heard, given, s.o.Fresh, s.clock()))
				if next == "" {
					sl.yield = yield
					try(k + 1)
					return
				}
				leads--
				given[next]++
				s.handOver(sl, func() { try(k + 1) })
			}
		})
	}
	try(0)
}

// handOver is the rest of Node.balance: stop leading, resign (delete the
// election key if it is still ours) and campaign again, behind the new
// leader.
func (s *clusterSim) handOver(sl *csSlot, then func()) {
	a, r := sl.a, sl.res
	sl.leading, sl.pending, sl.yield = false, nil, cluster.Candidate{}
	sl.lead.Drop()
	for i, w := range r.agentWatch {
		if w == sl {
			r.agentWatch = append(r.agentWatch[:i], r.agentWatch[i+1:]...)
			break
		}
	}
	if s.now < s.o.KillAt || s.o.KillAt == 0 {
		s.handovers++
		s.lastHandover = s.now
		if s.inWindow() {
			s.handoversWin++
		}
	}
	kv := sl.elec
	s.write(&csReq{from: a, apply: func(_ int64, at time.Duration) {
		if s.kv[kv.key] == kv {
			s.del(kv, at)
		}
	}, done: func(ok bool) {
		if ok && !a.dead && a.session {
			s.campaign(sl)
		}
		then()
	}}, time.Second)
}

// ---- etcd ----

// write sends a write request to etcd. It joins the next batch on
// arrival; the batch commits (Commit), then each request is applied in
// turn (ApplyCost), its watch events leave and its answer goes back. A
// request that finds etcd down is answered by the client's timeout (none:
// it waits forever, as a campaign does).
func (s *clusterSim) write(req *csReq, timeout time.Duration) {
	req.sentAt = s.now
	if a := req.from; a != nil && s.inWindow() {
		a.txns++
		a.puts += len(req.puts)
		for _, p := range req.puts {
			a.bytesOut += int64(len(p.key) + len(p.val))
		}
	}
	d := s.oneWay()
	s.at(d, func() {
		if s.down {
			s.timeout(req, timeout)
			return
		}
		s.batch = append(s.batch, req)
		if !s.committing {
			s.commit()
		}
	})
}

func (s *clusterSim) timeout(req *csReq, timeout time.Duration) {
	if timeout <= 0 || req.done == nil {
		return
	}
	left := max(0, req.sentAt+timeout-s.now)
	done := req.done
	s.at(left, func() { done(false) })
}

func (s *clusterSim) commit() {
	s.committing = true
	batch := s.batch
	s.batch = nil
	d := s.lognormal(s.o.Etcd.Commit, s.o.Etcd.CommitSigma)
	if s.inWindow() {
		s.commitMs = append(s.commitMs, ms(d))
		s.batchN = append(s.batchN, float64(len(batch)))
	}
	s.at(d, func() {
		if s.down {
			for _, req := range batch {
				s.timeout(req, s.o.Fresh)
			}
			s.committing = false
			return
		}
		start := max(s.now, s.applyFree)
		for i, req := range batch {
			at := start + time.Duration(i+1)*s.o.Etcd.ApplyCost
			s.applyReq(req, at)
		}
		n := time.Duration(len(batch)) * s.o.Etcd.ApplyCost
		s.applyFree = start + n
		if s.inWindow() {
			s.busy += n
		}
		s.committing = false
		if len(s.batch) > 0 {
			s.commit()
		}
	})
}

// applyReq applies one committed request at server time at (the model
// mutates the store now and dates what leaves at).
func (s *clusterSim) applyReq(req *csReq, at time.Duration) {
	ok := true
	if req.absent {
		ok = s.kv[req.puts[0].key] == nil
	}
	// A fenced put is a nested Txn(If(CreateRevision(election key) ==
	// the leader's), Then(put)): each is decided on its own.
	req.ok = make([]bool, len(req.puts))
	wrote := false
	for i, p := range req.puts {
		req.ok[i] = ok && (p.fence == nil || p.elec != nil && s.kv[p.elec.key] == p.elec)
		wrote = wrote || req.ok[i]
	}
	if wrote || ok && req.apply != nil {
		s.rev++
		if s.inWindow() {
			s.writes++
		}
		for i, p := range req.puts {
			if !req.ok[i] {
				continue
			}
			if s.inWindow() {
				s.puts++
			}
			s.put(p, req.lease, at)
			if p.landed != nil {
				p.landed()
			}
		}
		if ok && req.apply != nil {
			req.apply(s.rev, at)
		}
	}
	if req.done != nil {
		done := req.done
		s.at(at-s.now+s.oneWay(), func() { done(ok) })
	}
}

func (s *clusterSim) put(p csPut, l *csLease, at time.Duration) {
	kv := s.kv[p.key]
	if kv == nil {
		kv = &csKV{key: p.key, create: s.rev, kind: p.kind, res: p.res, agent: p.agent, cand: p.cand}
		s.kv[p.key] = kv
		if p.kind == kindDelay {
			p.res.delayKV = kv
		}
	}
	kv.val, kv.mod = p.val, s.rev
	if l != nil && !l.has[kv] {
		l.has[kv] = true
		l.keys = append(l.keys, kv)
	}
	kv.lease = l
	if s.inWindow() {
		s.bytesIn += int64(len(p.key) + len(p.val))
		s.putsKind[p.kind]++
	}
	s.fanout(kv, false, at)
}

func (s *clusterSim) del(kv *csKV, at time.Duration) {
	if s.kv[kv.key] != kv {
		return
	}
	delete(s.kv, kv.key)
	if kv.kind == kindDelay && kv.res.delayKV == kv {
		kv.res.delayKV = nil
	}
	if kv.kind == kindElection {
		r := kv.res
		for i, c := range r.cands {
			if c.elec == kv {
				r.cands = append(r.cands[:i], r.cands[i+1:]...)
				break
			}
		}
	}
	s.fanout(kv, true, at)
}

// fanout delivers a change to every watcher of the key, each after its
// own one-way latency.
func (s *clusterSim) fanout(kv *csKV, deleted bool, at time.Duration) {
	val := kv.val
	deliver := func(a *csAgent, fn func()) {
		if a.dead {
			return
		}
		if s.inWindow() {
			s.events++
			s.bytesOut += int64(len(kv.key) + len(val))
		}
		s.at(at-s.now+s.oneWay(), func() {
			if a.dead {
				return
			}
			if s.inWindow() {
				a.events++
				a.bytesIn += int64(len(kv.key) + len(val))
			}
			fn()
		})
	}
	switch kv.kind {
	case kindPolicy:
		rev := kv.mod
		for _, a := range s.policyW {
			deliver(a, func() { s.applyPolicy(a, val, rev) })
		}
	case kindDelay:
		if deleted {
			for _, sl := range kv.res.delayWatch {
				deliver(sl.a, func() {}) // Node.remove ignores it
			}
			return
		}
		for _, sl := range kv.res.delayWatch {
			deliver(sl.a, func() { s.receiveRecord(sl, val) })
		}
	case kindIndicator:
		id := kv.agent
		for _, sl := range kv.res.agentWatch {
			deliver(sl.a, func() {
				if !sl.leading {
					return
				}
				t0 := time.Now()
				if deleted {
					delete(sl.agents, id)
					delete(sl.heard, id)
				} else if ind, err := cluster.DecodeIndicator(val); err == nil {
					sl.agents[id] = ind
					sl.heard[id] = s.clock()
				}
				s.recvTime(sl.a, t0)
			})
		}
	case kindElection:
		if deleted {
			ws := kv.delWatchers
			kv.delWatchers = nil
			for _, w := range ws {
				deliver(w.sl.a, func() { s.waitDeletes(w.sl, w.gen) })
			}
		}
	}
}

func (s *clusterSim) recvTime(a *csAgent, t0 time.Time) {
	if s.inWindow() {
		a.recvNs += int64(time.Since(t0))
	}
}

// read is a linearizable read: served ReadIndex after it arrives; serve
// runs at the server and returns what the client does with the answer.
func (s *clusterSim) read(a *csAgent, serve func() func()) {
	if s.inWindow() {
		s.reads++
	}
	s.at(s.oneWay()+s.o.Etcd.ReadIndex, func() {
		if s.down {
			return // the client retries after its timeout; the run ends before etcd returns
		}
		then := serve()
		if then == nil {
			return
		}
		s.at(s.oneWay(), func() {
			if !a.dead {
				then()
			}
		})
	})
}

// leaseCheck is etcd's lessor: leases past their expiry are revoked
// through Raft, deleting their keys.
func (s *clusterSim) leaseCheck() {
	if !s.down {
		kept := s.leases[:0]
		for _, l := range s.leases {
			if l.expiry > s.now {
				kept = append(kept, l)
				continue
			}
			l.revoked = true
			s.batch = append(s.batch, &csReq{apply: func(_ int64, at time.Duration) {
				for _, kv := range l.keys {
					if kv.lease == l {
						s.del(kv, at)
					}
				}
			}})
			if !s.committing {
				s.commit()
			}
		}
		s.leases = kept
	}
	s.at(s.o.Etcd.LeaseCheck, s.leaseCheck)
}

// ---- Node's watches and campaigns ----

// watchDelay is Node.watch: read the shared record (remembered, not
// fresh) and watch it from there.
func (s *clusterSim) watchDelay(sl *csSlot) {
	r := sl.res
	s.read(sl.a, func() func() {
		r.delayWatch = append(r.delayWatch, sl)
		kv := r.delayKV
		if kv == nil {
			return nil
		}
		val := kv.val
		return func() {
			t0 := time.Now()
			if rec, err := cluster.DecodeShared(val); err == nil {
				sl.f.Receive(rec, false, s.clock())
			}
			s.recvTime(sl.a, t0)
		}
	})
}

// receiveRecord is Node.apply of a live shared record.
func (s *clusterSim) receiveRecord(sl *csSlot, val []byte) {
	now := s.clock()
	t0 := time.Now()
	rec, err := cluster.DecodeShared(val)
	if err != nil {
		return
	}
	if sl.f.Receive(rec, true, now) && rec.Yield == sl.a.id && rec.YieldRev > sl.yielded && !sl.leading && sl.campaigning {
		sl.yielded = rec.YieldRev
		s.requeue(sl)
	}
	s.recvTime(sl.a, t0)
	if s.inWindow() {
		s.sharedDeliv = append(s.sharedDeliv, ms(now.Sub(rec.Time)))
	}
}

// trackRecord starts following a record once etcd has it. An agent
// that applied it already (its leader, at the tick that made it: Own)
// counts at once.
func (s *clusterSim) trackRecord(r *csRes, rec *cluster.Shared) {
	if !s.inWindow() {
		return
	}
	n := 0
	for _, sl := range r.slots {
		if !sl.a.dead && !(sl.inCl && sl.counted >= rec.Seq) {
			n++
		}
	}
	if n == 0 {
		s.recordsDone++
		s.sharedProp = append(s.sharedProp, 0)
		return
	}
	r.tracks = append(r.tracks, &csTrack{seq: rec.Seq, made: rec.Time.Sub(s.epoch), need: n})
}

// campaign is Node.startCampaign's concurrency.Election.Campaign: put
// the candidate's key (under the lease) if absent, then wait until every
// key created before it is gone.
func (s *clusterSim) campaign(sl *csSlot) {
	a, r := sl.a, sl.res
	key := cluster.ElectionKey(s.prefix, r.name) + "/" + fmt.Sprintf("%x", a.lease.id)
	sl.campGen++
	sl.campaigning = true
	gen := sl.campGen
	s.write(&csReq{from: a, lease: a.lease, absent: true,
		puts: []csPut{{key: key, val: []byte(a.id), kind: kindElection, res: r, cand: sl}},
		apply: func(int64, time.Duration) {
			sl.elec = s.kv[key]
			r.cands = append(r.cands, sl)
		}, done: func(ok bool) {
			if ok && !a.dead {
				s.waitDeletes(sl, gen)
			}
		}}, 0)
}

// requeue is a campaign cancelled by a leader's yield (Node.startCampaign):
// Campaign deletes our key on the way out, then we campaign again, from
// the back of the line.
func (s *clusterSim) requeue(sl *csSlot) {
	a, kv := sl.a, sl.elec
	sl.campGen++ // the waits of the cancelled campaign are void
	sl.campaigning = false
	s.write(&csReq{from: a, apply: func(_ int64, at time.Duration) {
		if kv != nil && s.kv[kv.key] == kv {
			s.del(kv, at)
		}
	}, done: func(bool) {
		if !a.dead && a.session {
			s.campaign(sl)
		}
	}}, time.Second)
}

// waitDeletes is concurrency's waitDeletes: read the newest key created
// before ours; none → leading; else watch its deletion and look again.
// A wait of campaign gen ends once the slot has campaigned again.
func (s *clusterSim) waitDeletes(sl *csSlot, gen int) {
	r := sl.res
	s.read(sl.a, func() func() {
		if sl.campGen != gen {
			return nil
		}
		var pred *csSlot
		for _, c := range r.cands {
			if c == sl {
				break
			}
			pred = c
		}
		if pred == nil {
			return func() {
				if sl.campGen == gen {
					sl.campaigning = false
					s.elected(sl)
				}
			}
		}
		pred.elec.delWatchers = append(pred.elec.delWatchers, csWaiter{sl, gen})
		return nil
	})
}

// elected is the rest of startCampaign: build the controller, read every
// agent's indicator, lead, watch the indicators.
func (s *clusterSim) elected(sl *csSlot) {
	a, r := sl.a, sl.res
	ctrl, err := sharedPID(a.cfg, r.name)
	if err != nil {
		return
	}
	s.read(a, func() func() {
		r.agentWatch = append(r.agentWatch, sl)
		var vals [][]byte
		var ids []string
		for _, o := range r.slots {
			if kv := s.kv[cluster.AgentKey(s.prefix, r.name, o.a.id)]; kv != nil {
				vals, ids = append(vals, kv.val), append(ids, o.a.id)
			}
		}
		return func() {
			t0 := time.Now()
			clear(sl.agents)
			clear(sl.heard)
			for i, v := range vals {
				if ind, err := cluster.DecodeIndicator(v); err == nil {
					sl.agents[ids[i]] = ind
				}
			}
			sl.leading, sl.since, sl.yield = true, s.clock(), cluster.Candidate{}
			sl.lead.Elected(ctrl)
			s.recvTime(a, t0)
		}
	})
}

// ---- policies ----

// watchPolicy is Policies.Watch: read the policy, then watch it.
func (s *clusterSim) watchPolicy(a *csAgent) {
	s.read(a, func() func() {
		s.policyW = append(s.policyW, a)
		val, rev := s.policyKV.val, s.policyKV.mod
		return func() { s.applyPolicy(a, val, rev) }
	})
}

// putPolicy is an operator's Policies.Put of change k.
func (s *clusterSim) putPolicy(k int) {
	doc := s.policyDocs[k]
	if _, err := cluster.ValidatePolicy(doc); err != nil {
		return
	}
	s.policyPut = append(s.policyPut, s.now)
	s.write(&csReq{puts: []csPut{{key: s.policyKV.key, val: doc, kind: kindPolicy}}, apply: func(rev int64, _ time.Duration) {
		s.policyRev = append(s.policyRev, rev)
	}}, 0)
}

// applyPolicy is what the agent's policy watch does with a policy:
// Policies.Watch validates it, cmd/sanqos merges it over the agent's own
// config, and the node renews the shared controllers it leads.
func (s *clusterSim) applyPolicy(a *csAgent, doc []byte, rev int64) {
	if rev == a.appliedRev {
		return
	}
	a.appliedRev = rev
	t0 := time.Now()
	if _, err := cluster.ValidatePolicy(doc); err != nil {
		return
	}
	cfg, err := cluster.Merge(a.own, doc)
	if err != nil {
		return
	}
	a.cfg = cfg
	for _, sl := range a.slots {
		if sl.leading {
			sl.lead.Drop()
		}
	}
	a.policyCPU = append(a.policyCPU, float64(time.Since(t0))/1e6)
	for k, r := range s.policyRev {
		if r == rev && k > 0 {
			a.appliedPolicy[k] = s.now
			a.effect = append(a.effect, k)
		}
	}
}

func (s *clusterSim) policyInEffect(a *csAgent, k int) {
	if _, ok := a.effectAt[k]; !ok {
		a.effectAt[k] = s.now
	}
}

// ---- failures ----

// snapshot takes the steady state's sizes at the end of the rate window.
func (s *clusterSim) snapshot() {
	s.keysAtEnd, s.leasesAtEnd = len(s.kv), len(s.leases)
	for _, l := range s.leases {
		if l.revoked {
			s.leasesAtEnd--
		}
	}
	led := s.led()
	for _, r := range s.res {
		leader := false
		for _, sl := range r.slots {
			leader = leader || sl.leading && !sl.a.dead
		}
		if !leader {
			s.leaderlessAtKill++
		}
	}
	for _, a := range s.agents {
		if !a.dead {
			s.ledAtKill = append(s.ledAtKill, float64(led[a.idx]))
		}
	}
}

func (s *clusterSim) led() []int {
	led := make([]int, len(s.agents))
	for _, r := range s.res {
		for _, sl := range r.slots {
			if sl.leading && !sl.a.dead {
				led[sl.a.idx]++
			}
		}
	}
	return led
}

// kill: the agent leading the most resources dies without a goodbye.
func (s *clusterSim) kill() {
	led := s.led()
	var victim *csAgent
	for _, a := range s.agents {
		if !a.dead && (victim == nil || led[a.idx] > led[victim.idx]) {
			victim = a
		}
	}
	if victim == nil {
		return
	}
	s.killed, s.killedLed = victim, led[victim.idx]
	for _, sl := range victim.slots {
		if !sl.leading {
			continue
		}
		for _, o := range sl.res.slots {
			if o.a != victim {
				o.deathMode = csFailure{watch: true, fellAt: -1, rejoinAt: -1, decayedAt: -1}
			}
		}
	}
	victim.dead = true
	for _, sl := range victim.slots {
		sl.leading = false
		// The dead agent applies nothing more: its records count as
		// propagated once the living have them.
		r := sl.res
		kept := r.tracks[:0]
		for _, tr := range r.tracks {
			if tr.seq > sl.counted {
				tr.need--
			}
			if tr.need <= 0 {
				s.recordsDone++
				s.sharedProp = append(s.sharedProp, ms(tr.max))
				continue
			}
			kept = append(kept, tr)
		}
		r.tracks = kept
	}
}

// outage: etcd stops answering; requests in flight are lost.
func (s *clusterSim) outage() {
	s.down = true
	for _, a := range s.agents {
		if a.dead {
			continue
		}
		for _, sl := range a.slots {
			if sl.f.Mode == cluster.ModeCluster {
				sl.outageMode = csFailure{watch: true, fellAt: -1, rejoinAt: -1, decayedAt: -1}
			}
		}
	}
}

func (s *clusterSim) failureTick(sl *csSlot) {
	if m := &sl.deathMode; m.watch {
		if m.fellAt < 0 && sl.f.Mode != cluster.ModeCluster {
			m.fellAt, m.lastRecAt = s.now, sl.f.RecvAt.Sub(s.epoch)
		}
		if m.fellAt >= 0 && m.rejoinAt < 0 && sl.f.Mode == cluster.ModeCluster && sl.f.Shared.Leader != s.killed.id {
			m.rejoinAt = s.now
		}
	}
	if m := &sl.outageMode; m.watch {
		if m.fellAt < 0 && sl.f.Mode != cluster.ModeCluster {
			m.fellAt, m.lastRecAt, m.residue = s.now, sl.f.RecvAt.Sub(s.epoch), float64(sl.f.Shared.Step)
		}
		if m.fellAt >= 0 && m.decayedAt < 0 && sl.f.Mode == cluster.ModeLocal {
			m.decayedAt = s.now
			m.aboveLoc = sl.applied != sl.localOut
		}
	}
}

// ---- the summary ----

func dist(xs []float64) report.Dist { return report.RoundDist(report.Describe(xs)) }

func (s *clusterSim) summary() *ClusterScaleSummary {
	o := s.o
	w := s.window().Seconds()
	sum := &ClusterScaleSummary{Experiment: "cluster-scale", Options: o, Agents: o.Agents, Resources: o.Resources, Consumers: o.Consumers,
		Spread: o.Spread, IntervalMs: int(Interval / time.Millisecond), SimulatedS: o.Length.Seconds(), RateWindowS: w,
		Events: s.events0, WatchBoundMs: ms(o.Etcd.WatchBound()), SpuriousFallbacks: s.spurious}
	if s.formedAt >= 0 {
		first := o.Length
		for _, a := range s.agents {
			first = min(first, a.start)
		}
		sum.FormedMs = report.Round(ms(s.formedAt-first), 1)
	}
	// Policies.
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
	sum.SharedPropagationMs, sum.SharedDeliveredMs = dist(s.sharedProp), dist(s.sharedDeliv)
	sum.SharedRecords = s.recordsDone
	for _, r := range s.res {
		sum.SharedRecordsPartial += len(r.tracks)
	}
	// Per agent.
	var ticks, cpuPer, puts, txns, evs, bout, bin, nres []float64
	for _, a := range s.agents {
		nres = append(nres, float64(len(a.slots)))
		if a.ticks == 0 { // (the killed agent counts: the window ends at its death)
			continue
		}
		ticks = append(ticks, a.tickUs...)
		cpuPer = append(cpuPer, float64(a.tickNs+a.pubNs+a.recvNs)/1e3/float64(a.ticks))
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
		first := o.Length
		for _, a := range s.agents {
			first = min(first, a.start)
		}
		sum.LastHandoverMs = report.Round(ms(s.lastHandover-first), 1)
	}
	// etcd.
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
	sum.PaperVsModel = s.paper(sum)
	// Failures.
	if s.killed != nil {
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
	if o.OutageAt > 0 {
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
					fall = append(fall, ms(m.fellAt-o.OutageAt))
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
	return sum
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
