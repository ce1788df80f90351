package sim

import (
	"math/rand/v2"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/config"
)

type csKind uint8

const (
	kindIndicator csKind = iota
	kindDelay
	kindElection
	kindPolicy
)

// csKV is one key in the modelled store; kind says what it is.
type csKV struct {
	key, val    string
	create, mod int64
	lease       *csLease
	kind        csKind
}

type csLease struct {
	id      int64
	expiry  time.Duration
	revoked bool
	keys    []*csKV // attached, in order (for a deterministic revoke)
}

// csReq is one write request: a transaction of puts under a lease, or
// an operation of its own (apply: a grant, a revoke, a campaign's put,
// a resign); done runs at the client when the answer comes.
type csReq struct {
	from  *csAgent // nil: the operator or etcd itself
	puts  []cluster.Put
	lease int64
	apply func(at time.Duration)
	done  func()
	// ok[i]: puts[i] was written (its fence held).
	ok []bool
}

// csWatcher is one watch at the server: a key, or the keys under it.
// Events wait in got until its proc takes them (on readies it), or go
// to fn (the model's own policy watch).
type csWatcher struct {
	a      *csAgent
	key    string
	prefix bool
	closed bool
	got    []histEv
	on     func()
}

// histEv is one change in the model's history.
type histEv struct {
	rev  int64
	at   time.Duration
	made time.Time // a shared record's
	ev   cluster.Event
}

type csRes struct {
	idx      int
	name     string
	slots    []*csSlot
	writer   *csSlot // the slot serving the resource's writer
	writerOn [2]time.Duration
	excessMs float64
	tracks   []*csTrack
}

// csTrack follows one published record until every agent serving its
// resource has applied it (or a later one).
type csTrack struct {
	seq  uint64
	made time.Duration
	need int
	max  time.Duration
}

// csSlot is one agent's side of one resource: the agent's local
// controller, its consumers, what its Node reported at the last tick
// (st), and the model's bookkeeping.
type csSlot struct {
	a        *csAgent
	res      *csRes
	local    agent.Controller
	readers  []cluster.Consumer
	writer   *cluster.Consumer
	st       cluster.ResourceStatus
	inCl     bool
	counted  uint64
	applied  int
	localOut int
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
	idx     int
	id      string
	start   time.Duration
	tickOff time.Duration
	slots   []*csSlot
	node    *cluster.Node
	dead    bool
	own     []byte // its own config file
	cfg     *config.Config
	// policy: change index → delivered at; in-effect pending
	effect []int
	// accounting (rate window)
	ticks                   int
	tickNs, bgNs            int64
	puts, txns, events      int
	bytesOut, bytesIn       int64
	tickUs                  []float64
	policyCPU               []float64
	appliedPolicy, effectAt map[int]time.Duration
	appliedRev              int64
}

type clusterSim struct {
	o      ClusterScaleOptions
	rng    *rand.Rand
	q      timeline[func()]
	now    time.Duration
	epoch  time.Time
	agents []*csAgent
	res    []*csRes
	prefix string

	// the procs (cluster_runtime.go)
	procs  []*proc
	runq   []*proc
	cur    *proc
	back   chan struct{}
	ending bool

	// etcd
	rev         int64
	bumped      bool
	kv          map[string]*csKV
	lines       map[string][]*csKV // election lines, by create revision
	watch       map[string][]*csWatcher
	watchPrefix map[string][]*csWatcher
	hist        []histEv
	compacted   int64
	leases      map[int64]*csLease
	leaseList   []*csLease
	nextLease   int64
	batch       []*csReq
	committing  bool
	applyFree   time.Duration
	down        bool
	policyKey   string
	resOf       map[string]*csRes // by delay key

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

// windowEnd is where the rate window ends: at KillAt, else the run's end.
func (s *clusterSim) windowEnd() time.Duration {
	if s.o.KillAt > 0 {
		return s.o.KillAt
	}
	return s.o.Length
}

func (s *clusterSim) inWindow() bool        { return s.now >= s.o.Warmup && s.now < s.windowEnd() }
func (s *clusterSim) window() time.Duration { return s.windowEnd() - s.o.Warmup }

func (s *clusterSim) at(d time.Duration, fn func()) {
	s.q.push(s.now+d, fn)
}

func (s *clusterSim) clock() time.Time { return s.epoch.Add(s.now) }
