package sim

import (
	"math"
	"sort"
	"strings"
	"time"

	"github.com/sanqos/sanqos/cluster"
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

// write sends a write request to etcd. It joins the next batch on
// arrival; the batch commits (Commit), then each request is applied in
// turn (ApplyCost), its watch events leave and its answer goes back. A
// request that finds etcd down is answered by the client's timeout (none:
// it waits forever, as a campaign does).

// write sends a write request to etcd. It joins the next batch on
// arrival; the batch commits (Commit), then each request is applied in
// turn (ApplyCost), its watch events leave and its answer goes back. A
// request that finds etcd down is never answered: its client's context
// ends it.
func (s *clusterSim) write(req *csReq) {
	if a := req.from; a != nil && s.inWindow() {
		a.txns++
		a.puts += len(req.puts)
		for _, p := range req.puts {
			a.bytesOut += int64(len(p.Key) + len(p.Value))
		}
	}
	s.at(s.oneWay(), func() {
		if s.down {
			return
		}
		s.batch = append(s.batch, req)
		if !s.committing {
			s.commit()
		}
	})
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
		s.committing = false
		if s.down {
			return
		}
		start := max(s.now, s.applyFree)
		for i, req := range batch {
			s.applyReq(req, start+time.Duration(i+1)*s.o.Etcd.ApplyCost)
		}
		n := time.Duration(len(batch)) * s.o.Etcd.ApplyCost
		s.applyFree = start + n
		if s.inWindow() {
			s.busy += n
		}
		if len(s.batch) > 0 {
			s.commit()
		}
	})
}

// applyReq applies one committed request at server time at (the model
// mutates the store now and dates what leaves at). A request that wrote
// makes one revision (newRev).
func (s *clusterSim) applyReq(req *csReq, at time.Duration) {
	s.bumped = false
	// A fenced put is a nested Txn(If(CreateRevision(fence) == rev),
	// Then(put)): each is decided on its own.
	req.ok = make([]bool, len(req.puts))
	for i, p := range req.puts {
		f := s.kv[p.FenceKey]
		if req.ok[i] = p.FenceKey == "" || f != nil && f.create == p.FenceRev; req.ok[i] {
			s.newRev()
		}
	}
	if req.apply != nil {
		req.apply(at)
	}
	for i, p := range req.puts {
		if req.ok[i] {
			s.put(p.Key, p.Value, s.leases[req.lease], at)
		}
	}
	s.answer(req.from, at, req.done)
}

// newRev makes the revision of the request being applied, once.
func (s *clusterSim) newRev() {
	if !s.bumped {
		s.bumped = true
		s.rev++
		if s.inWindow() {
			s.writes++
		}
	}
}

// answer runs done at the client one way after server time at.
func (s *clusterSim) answer(a *csAgent, at time.Duration, done func()) {
	if done != nil {
		s.at(at-s.now+s.oneWay(), func() {
			if a == nil || !a.dead {
				done()
			}
		})
	}
}

func (s *clusterSim) put(key, val string, l *csLease, at time.Duration) {
	kv := s.kv[key]
	if kv == nil {
		kv = &csKV{key: key, create: s.rev, kind: s.kindOf(key)}
		s.kv[key] = kv
		if kv.kind == kindElection {
			d := key[:strings.LastIndexByte(key, '/')+1]
			s.lines[d] = append(s.lines[d], kv)
		}
	}
	kv.val, kv.mod = val, s.rev
	if l != nil && kv.lease != l {
		l.keys = append(l.keys, kv)
	}
	kv.lease = l
	if s.inWindow() {
		s.puts++
		s.bytesIn += int64(len(key) + len(val))
		s.putsKind[kv.kind]++
	}
	var made time.Time
	if kv.kind == kindDelay {
		if rec, err := cluster.DecodeShared([]byte(val)); err == nil {
			made = rec.Time
			s.trackRecord(s.resOf[key], rec)
		}
	}
	s.fanout(kv, false, at, made)
}

func (s *clusterSim) del(kv *csKV, at time.Duration) {
	if s.kv[kv.key] != kv {
		return
	}
	delete(s.kv, kv.key)
	if kv.kind == kindElection {
		d := kv.key[:strings.LastIndexByte(kv.key, '/')+1]
		line := s.lines[d]
		for i, c := range line {
			if c == kv {
				s.lines[d] = append(line[:i], line[i+1:]...)
				break
			}
		}
	}
	s.fanout(kv, true, at, time.Time{})
}

// kindOf says what a key is, for the accounting.
func (s *clusterSim) kindOf(key string) csKind {
	switch {
	case key == s.policyKey:
		return kindPolicy
	case strings.HasSuffix(key, "/delay"):
		return kindDelay
	case strings.Contains(key, "/agents/"):
		return kindIndicator
	}
	return kindElection
}

// fanout logs a change and delivers it to every watcher of the key, each
// after its own one-way latency; made is when a shared record was made.
func (s *clusterSim) fanout(kv *csKV, deleted bool, at time.Duration, made time.Time) {
	ev := histEv{rev: s.rev, at: at, made: made, ev: cluster.Event{KeyValue: cluster.KeyValue{Key: kv.key, Value: []byte(kv.val), CreateRevision: kv.create}, Deleted: deleted}}
	s.hist = append(s.hist, ev)
	s.trimHist()
	for _, w := range s.watch[kv.key] {
		s.deliver(w, ev, at)
	}
	for i := range len(kv.key) {
		if kv.key[i] == '/' {
			for _, w := range s.watchPrefix[kv.key[:i+1]] {
				s.deliver(w, ev, at)
			}
		}
	}
}

// histKeep is how long the model keeps its history of changes, for
// watches that start from a past revision (etcd compacts it later).
const histKeep = 2 * time.Second

func (s *clusterSim) trimHist() {
	if s.hist[0].at >= s.now-2*histKeep {
		return
	}
	k := sort.Search(len(s.hist), func(i int) bool { return s.hist[i].at >= s.now-histKeep })
	s.compacted = s.hist[k-1].rev
	s.hist = append(s.hist[:0], s.hist[k:]...)
}

// deliver sends one event to watcher w, one way after server time at.
func (s *clusterSim) deliver(w *csWatcher, h histEv, at time.Duration) {
	ev := h.ev
	if w.a.dead {
		return
	}
	n := int64(len(ev.Key) + len(ev.Value))
	if s.inWindow() {
		s.events++
		s.bytesOut += n
	}
	s.at(at-s.now+s.oneWay(), func() {
		if w.closed || w.a.dead {
			return
		}
		if s.inWindow() {
			w.a.events++
			w.a.bytesIn += n
		}
		if !h.made.IsZero() && s.inWindow() {
			s.sharedDeliv = append(s.sharedDeliv, ms(s.clock().Sub(h.made)))
		}
		w.got = append(w.got, h)
		w.on()
	})
}

// register starts w at the server from revision from: the changes since
// then, from the history, go first. It reports false if the history no
// longer reaches back to from.
func (s *clusterSim) register(w *csWatcher, from int64, at time.Duration) bool {
	if from <= s.compacted {
		return false
	}
	if w.prefix {
		s.watchPrefix[w.key] = append(s.watchPrefix[w.key], w)
	} else {
		s.watch[w.key] = append(s.watch[w.key], w)
	}
	k := sort.Search(len(s.hist), func(i int) bool { return s.hist[i].rev >= from })
	for _, h := range s.hist[k:] {
		if h.ev.Key == w.key || w.prefix && strings.HasPrefix(h.ev.Key, w.key) {
			s.deliver(w, h, at)
		}
	}
	return true
}

func (s *clusterSim) unregister(w *csWatcher) {
	w.closed = true
	m := s.watch
	if w.prefix {
		m = s.watchPrefix
	}
	for i, o := range m[w.key] {
		if o == w {
			m[w.key] = append(m[w.key][:i], m[w.key][i+1:]...)
			return
		}
	}
}

// read is a linearizable read: served ReadIndex after it arrives; serve
// runs at the server and returns what the client does with the answer.
// A read that finds etcd down is never answered.
func (s *clusterSim) read(a *csAgent, serve func() func()) {
	if s.inWindow() {
		s.reads++
	}
	s.at(s.oneWay()+s.o.Etcd.ReadIndex, func() {
		if s.down {
			return
		}
		s.answer(a, s.now, serve())
	})
}

// leaseCheck is etcd's lessor: leases past their expiry are revoked
// through Raft, deleting their keys.
func (s *clusterSim) leaseCheck() {
	if !s.down {
		for _, l := range s.leaseList {
			if l.expiry > s.now || l.revoked {
				continue
			}
			l.revoked = true
			s.batch = append(s.batch, &csReq{apply: func(at time.Duration) { s.newRev(); s.revoke(l, at) }})
			if !s.committing {
				s.commit()
			}
		}
	}
	s.at(s.o.Etcd.LeaseCheck, s.leaseCheck)
}

func (s *clusterSim) revoke(l *csLease, at time.Duration) {
	l.revoked = true
	for _, kv := range l.keys {
		if kv.lease == l {
			s.del(kv, at)
		}
	}
	l.keys = nil
}
