package sim

import (
	"math"
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
				if !sl.Leading {
					return
				}
				t0 := time.Now()
				if deleted {
					sl.Forget(id)
				} else if ind, err := cluster.DecodeIndicator(val); err == nil {
					sl.Hear(id, ind, true, s.clock())
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
