package cluster

import (
	"cmp"
	"encoding/json"
	"math"
	"strings"
	"time"

	"github.com/sanqos/sanqos/control"
)

// The pure half of a Node: what an agent decides for one resource each
// tick, with no etcd, goroutine or clock of its own. Node runs it between
// its watches and its publisher.

// Defaults of Config, exported so that a model of the cluster runs with
// the timing the agents run with.
const (
	DefaultTTL          = 2 // seconds
	DefaultFresh        = 500 * time.Millisecond
	DefaultDecay        = 4 * time.Second
	DefaultBlend        = time.Second
	DefaultPublishEvery = 100 * time.Millisecond
)

// MaxTxnOps is how many indicators one transaction carries (etcd's
// default --max-txn-ops is 128).
const MaxTxnOps = 100

// Balancing leadership (issue 22: the first agent to campaign won every
// resource it serves, 30 where the mean is 10, and its death moved all 30
// at once).
const (
	// DefaultBalanceEvery is how often a leader looks for a resource to
	// hand over (Config.BalanceEvery), at most one per look.
	DefaultBalanceEvery = 250 * time.Millisecond
	// DefaultBalanceHold is how long a leader keeps a resource it won
	// before it may hand it on (Config.BalanceHold).
	DefaultBalanceHold = time.Second
	// HandOverGap is the hysteresis of HandOver, in resources.
	HandOverGap = 2
)

// ShareOf is one resource's part of its agents' fair shares of
// leadership: 1/k, k being the live agents that serve it as far as this
// agent knows (Seen).
func ShareOf(k int) float64 { return 1 / float64(max(1, k)) }

// Seen is how many agents serve a resource as far as this agent knows:
// its leader counts the indicators it watches (its own included), a
// follower takes the leader's count from the last record, and without a
// record it knows only itself.
func Seen(leading bool, id string, agents map[string]Indicator, f *Follower) int {
	switch {
	case leading:
		k := len(agents)
		if _, ok := agents[id]; !ok {
			k++
		}
		return k
	case f.HaveRec:
		return max(1, f.Shared.Agents)
	}
	return 1
}

// HandOver is the balancing rule: a leader that leads leads resources,
// its fair share being share (the sum of ShareOf over the resources it
// serves), hands one of them to the agent next in line for it, whose last
// indicator is next, when it leads more than its share and its excess
// (leads − share) is at least HandOverGap above that agent's. After the
// move the giver's excess is still at least the taker's, so the move is
// never undone (no flapping), and every move lowers the sum of the
// squared excesses by at least 2, so the moves stop. The giver resigns
// and campaigns again at once, behind the taker: it stays a candidate, so
// balancing never leaves a resource without one, and it moves a resource
// only to a live agent that is already in line for it (see Node).
func HandOver(leads int, share float64, next Indicator) bool {
	if next.Share <= 0 {
		return false // an agent that does not balance, or has not said
	}
	self := float64(leads) - share
	return self > 0 && self-(float64(next.Leads)-next.Share) >= HandOverGap
}

// Candidate is one place in a resource's election line: the agent and
// the create revision of its key, which orders the line.
type Candidate struct {
	ID  string
	Rev int64
}

// Balance is a leader's decision on one read of its resource's election
// line (line[0] is itself): hand the resource to the next in line when
// HandOver allows it (handTo); otherwise, when HandOver allows a candidate
// further back, ask the next in line to step to the back of the line
// (yield), so that the lighter one moves up. live gives an agent's
// indicator if it came live within Fresh.
//
// Without the second half an agent could wait forever: one that joins
// late, or that lost the race for every key at start, is last in every
// line, and a leader hands over only to its next in line, an agent that
// may be within HandOverGap of it (issue 22's TestLeadershipSpreads was
// left at 4/0/5 for that reason). A yield moves only a candidate that
// does not lead, so it changes who would lead after the leader and
// nothing else; it is asked only while a lighter live agent stands behind
// it, which the next move then gives the resource to, so yields stop when
// handovers do.
func Balance(leads int, share float64, line []Candidate, live func(id string) (Indicator, bool)) (handTo string, yield Candidate) {
	if len(line) < 2 {
		return "", Candidate{}
	}
	if ind, ok := live(line[1].ID); ok && HandOver(leads, share, ind) {
		return line[1].ID, Candidate{}
	}
	for _, c := range line[2:] {
		if ind, ok := live(c.ID); ok && HandOver(leads, share, ind) {
			return "", line[1]
		}
	}
	return "", Candidate{}
}

// LiveLoads is how the balancer sees a resource's agents at now: an
// agent's last indicator if it came live (heard) within fresh, its leads
// raised by the resources given to it earlier in the same look.
func LiveLoads(agents map[string]Indicator, heard map[string]time.Time, given map[string]int, fresh time.Duration, now time.Time) func(id string) (Indicator, bool) {
	return func(id string) (Indicator, bool) {
		ind, known := agents[id]
		ind.Leads += given[id]
		return ind, known && now.Sub(heard[id]) <= fresh
	}
}

// AnyLighter reports whether HandOver allows some live agent of agents
// other than self: only then is the resource's line worth a read.
func AnyLighter(self string, leads int, share float64, agents map[string]Indicator, live func(id string) (Indicator, bool)) bool {
	for id := range agents {
		if ind, ok := live(id); ok && id != self && HandOver(leads, share, ind) {
			return true
		}
	}
	return false
}

// Timing is what the follower and the leader take from Config.
type Timing struct {
	Fresh, Decay, Blend time.Duration
}

// Keys of a resource: agents' indicators, the election, the shared delay.
func resourceKey(prefix, res string) string { return prefix + "/resources/" + res + "/" }

// AgentKey is where agent id publishes its indicator of res.
func AgentKey(prefix, res, id string) string { return resourceKey(prefix, res) + "agents/" + id }

// ElectionKey is the prefix of res's election (one key per candidate).
func ElectionKey(prefix, res string) string { return resourceKey(prefix, res) + "leader" }

// DelayKey is where res's leader publishes the shared delay.
func DelayKey(prefix, res string) string { return resourceKey(prefix, res) + "delay" }

// AgentsPrefix is the prefix of every agent's indicator of res.
func AgentsPrefix(prefix, res string) string { return resourceKey(prefix, res) + "agents/" }

func agentFromKey(prefix, res, key string) string {
	return strings.TrimPrefix(key, AgentsPrefix(prefix, res))
}

// EncodeIndicator is an indicator as it is written to etcd, stamped with
// the time it was measured.
func EncodeIndicator(ind Indicator, at time.Time) ([]byte, error) {
	return json.Marshal(ind.wire(at))
}

// DecodeIndicator reads what EncodeIndicator wrote (WaitMs NaN for null).
func DecodeIndicator(b []byte) (Indicator, error) {
	var w wireIndicator
	if err := json.Unmarshal(b, &w); err != nil {
		return Indicator{}, err
	}
	return w.indicator(), nil
}

// EncodeShared is a shared record as its leader writes it.
func EncodeShared(rec *Shared) ([]byte, error) { return json.Marshal(rec) }

// DecodeShared reads a shared record.
func DecodeShared(b []byte) (Shared, error) {
	var rec Shared
	err := json.Unmarshal(b, &rec)
	return rec, err
}

// Follower is one agent's side of one resource's shared step: the last
// record it received and the step it applied. The zero value is an agent
// in local control that has heard nothing yet.
type Follower struct {
	// Shared is the last record taken, HaveRec whether there is one, and
	// RecvAt when it arrived live (the receiver's clock; zero if it was
	// only read, see Receive).
	Shared  Shared
	HaveRec bool
	RecvAt  time.Time
	// Mode and Applied are what the last Step returned (Applied before
	// rounding up).
	Mode    Mode
	Applied float64
	// The transition in progress: when the current mode began, from
	// which applied value.
	edgeAt   time.Time
	edgeFrom float64
	// own: the record followed is this agent's own as its leader, and
	// etcd confirmed one of its own since the last record of another
	// leader came (Confirm): the leader may follow its next records at
	// once (Own).
	own bool
}

// Receive takes a shared record. A record that arrived live (from the
// watch) is stamped now; one found by a read is remembered but not
// counted as fresh, because only a live one proves a live leader (a dead
// one's record outlives it by a TTL). It reports false for a replay: the
// same leader's record with a sequence number not above the last one
// (sequence numbers only grow across leaders, since a new one continues
// from the last it saw).
func (f *Follower) Receive(rec Shared, live bool, now time.Time) bool {
	if f.HaveRec && rec.Seq <= f.Shared.Seq && rec.Leader == f.Shared.Leader {
		return false
	}
	if rec.Leader != f.Shared.Leader {
		f.own = false // another leader speaks: our own records wait for etcd
	}
	f.Shared, f.HaveRec = rec, true
	if live {
		f.RecvAt = now
	}
	return true
}

// Own is the leader following the record it has just made, in the tick
// that made it, rather than a tick later when etcd echoes it (issue 22:
// the leader applied its own step a tick late). Only the step and the
// sequence move: the record's freshness stays that of the last record of
// its own that etcd confirmed (Confirm), so a leader cut off from etcd
// falls back within Fresh exactly as its followers do, and a leader that
// has not had one confirmed yet — a new one, or one that another leader's
// record has since reached (it may be deposed without knowing) — waits
// for etcd as a follower does.
func (f *Follower) Own(rec Shared) {
	if f.own && f.HaveRec && rec.Leader == f.Shared.Leader && rec.Seq > f.Shared.Seq {
		f.Shared = rec
	}
}

// Confirm is etcd's answer that the leader's fenced record rec landed:
// for the leader it is what a live receipt is for a follower (the record
// is in etcd now, and this agent still held the election key when it was
// written). It takes rec unless a newer record is followed — one of our
// own taken by Own, or another leader's with a higher sequence (ours is
// then history: its answer came after the other's record) — and in the
// first case it refreshes the record's freshness.
func (f *Follower) Confirm(rec Shared, now time.Time) {
	switch {
	case f.HaveRec && f.Shared.Leader == rec.Leader:
		if rec.Seq > f.Shared.Seq {
			f.Shared = rec
		}
	case f.HaveRec && f.Shared.Seq >= rec.Seq:
		return
	default:
		f.Shared, f.HaveRec = rec, true
	}
	f.RecvAt, f.own = now, true
}

// Fresh reports whether the shared step may be followed at now.
func (f *Follower) Fresh(t Timing, now time.Time) bool {
	return f.HaveRec && now.Sub(f.RecvAt) <= t.Fresh
}

// Step is the step to apply given the local controller's, and where it
// came from (see Node.Delay): the shared step while the last record is
// fresh, a rise blended in over Blend when entering cluster mode and a
// fall applied at once; without a fresh record max(local, what is left of
// the lost shared step), that residue falling linearly to zero over Decay.
func (f *Follower) Step(t Timing, local int, now time.Time) (int, Mode) {
	f.Mode = cmp.Or(f.Mode, ModeLocal)
	var out float64
	switch {
	case f.Fresh(t, now):
		if f.Mode != ModeCluster {
			f.Mode, f.edgeAt, f.edgeFrom = ModeCluster, now, f.Applied
		}
		// Only a rise is blended: a lower delay is applied at once, as the
		// agent's rise limit does (a release never hurts TCP, and a
		// throttle the cluster no longer asks for must not linger).
		target := float64(f.Shared.Step)
		k := min(1, float64(now.Sub(f.edgeAt))/float64(t.Blend))
		out = f.edgeFrom + (target-f.edgeFrom)*k
		if target <= out {
			out, f.edgeAt = target, now.Add(-t.Blend) // blend over
		}
	default:
		if f.Mode == ModeCluster {
			f.Mode, f.edgeAt, f.edgeFrom = ModeDegraded, now, f.Applied
		}
		out = float64(local)
		if f.Mode == ModeDegraded {
			left := f.edgeFrom * (1 - float64(now.Sub(f.edgeAt))/float64(t.Decay))
			if left <= 0 {
				f.Mode = ModeLocal
			} else {
				out = max(out, left)
			}
		}
	}
	f.Applied = out
	return int(math.Ceil(out - 1e-9)), f.Mode
}

// Leader is the shared controller of one resource on the agent that leads
// it, and the records it has published.
type Leader struct {
	ctrl     control.Controller
	preset   bool // the controller is new: start it from the output in force
	seq      uint64
	lastRec  time.Time
	lastStep int
}

// Elected starts a leadership with a new controller: its first Step
// starts it from the outputs in force.
func (l *Leader) Elected(ctrl control.Controller) {
	l.ctrl, l.preset, l.lastStep = ctrl, true, -1
}

// Renewed replaces the controller while leading (a new policy's gains and
// threshold): it goes on from this leader's own last step.
func (l *Leader) Renewed(ctrl control.Controller) { l.ctrl, l.preset = ctrl, true }

// HasController is false after Drop, until Elected or Renewed.
func (l *Leader) HasController() bool { return l.ctrl != nil }

// Drop forgets the controller (a policy renewal, or the end of the
// leadership); the sequence number is kept, so records keep growing.
func (l *Leader) Drop() { l.ctrl = nil }

// Lead is one tick of a leader.
type Lead struct {
	// Rec is the record to publish, nil when the step is unchanged and
	// the last record is younger than Fresh/3.
	Rec *Shared
	// Preset: the controller was new this tick and started from From.
	Preset bool
	From   int
}

// Step runs the shared controller one tick over every agent's indicator —
// agents as received, with this agent's own (id, own) laid over its echo,
// which is older — and makes the record to publish. The record is
// republished when the step changes and at least three times per Fresh,
// so followers can tell a live leader from a dead one. f is this agent's
// follower side: a new leader takes over from the previous leader's step
// if it is no older than Decay, and continues its sequence numbers.
func (l *Leader) Step(id string, own Indicator, agents map[string]Indicator, f *Follower, t Timing, step time.Duration, now time.Time) Lead {
	all := inIDOrder(id, own, agents)
	wait, _ := aggregate(all)
	var out Lead
	if l.preset {
		l.preset = false
		from := weightedLocalStep(all)
		if l.lastStep >= 0 && l.seq > 0 {
			from = l.lastStep // renewed: continue from our own output
		} else if f.HaveRec && now.Sub(f.RecvAt) <= t.Decay {
			from = f.Shared.Step // take over from the previous leader
		}
		if p, ok := l.ctrl.(interface{ Preset(int) }); ok {
			p.Preset(from)
		}
		out.Preset, out.From = true, from
	}
	s := l.ctrl.Update(wait)
	if s == l.lastStep && now.Sub(l.lastRec) < t.Fresh/3 && l.seq > 0 {
		return out
	}
	l.seq = max(l.seq, f.Shared.Seq) + 1
	rec := &Shared{Seq: l.seq, Leader: id, Time: now, Step: s, Agents: len(all),
		DelayNs: int64(control.Step(s, step)), Consumers: throttleable(all)}
	if !math.IsNaN(wait) {
		rec.WaitMs = &wait
	}
	l.lastRec, l.lastStep = now, s
	out.Rec = rec
	return out
}
