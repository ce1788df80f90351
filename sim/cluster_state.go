package sim

import (
	"container/heap"
	"math/rand/v2"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/config"
)

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

// csSlot is one agent's side of one resource: the cluster.Seat that the
// product's rules change (as Node's resState holds one) and the model's
// own bookkeeping.
type csSlot struct {
	a     *csAgent
	res   *csRes
	local agent.Controller
	cluster.Seat
	// campaign in progress (gen counts campaigns, so a requeued one's
	// waits are void)
	campaigning bool
	campGen     int
	readers     []cluster.Consumer
	writer      *cluster.Consumer
	indTime     time.Time
	dirty       bool
	lastPub     time.Time
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
