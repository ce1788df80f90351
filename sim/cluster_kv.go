package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sanqos/sanqos/cluster"
)

// simKV is cluster.KV on the modelled etcd, for agent a's Node: each call
// is a request with the model's latencies, and blocks the calling proc
// until its answer comes or its context ends.
type simKV struct {
	s *clusterSim
	a *csAgent
}

var errCompacted = errors.New("sim: watch history compacted")

// call sends req and waits for its answer (or ctx).
func (k simKV) call(ctx context.Context, req *csReq) error {
	s, p := k.s, k.s.cur
	answered := false
	req.from, req.done = k.a, func() { answered = true; s.ready(p) }
	s.write(req)
	return s.await(ctx, func() bool { return answered })
}

// get reads at the server (serve) and waits for the answer.
func (k simKV) get(ctx context.Context, serve func()) error {
	s, p := k.s, k.s.cur
	answered := false
	s.read(k.a, func() func() {
		serve()
		return func() { answered = true; s.ready(p) }
	})
	return s.await(ctx, func() bool { return answered })
}

func (k simKV) Grant(ctx context.Context, ttl int64) (int64, error) {
	s := k.s
	var id int64
	err := k.call(ctx, &csReq{apply: func(at time.Duration) {
		s.newRev()
		s.nextLease++
		id = s.nextLease
		l := &csLease{id: id, expiry: at + time.Duration(ttl)*time.Second}
		s.leases[id] = l
		s.leaseList = append(s.leaseList, l)
	}})
	return id, err
}

func (k simKV) Revoke(ctx context.Context, lease int64) {
	s := k.s
	k.call(ctx, &csReq{apply: func(at time.Duration) {
		s.newRev()
		if l := s.leases[lease]; l != nil && !l.revoked {
			s.revoke(l, at)
		}
	}})
}

func (k simKV) Txn(ctx context.Context, lease int64, puts []cluster.Put) ([]bool, error) {
	req := &csReq{puts: puts, lease: lease}
	if err := k.call(ctx, req); err != nil {
		return nil, err
	}
	return req.ok, nil
}

func (k simKV) Get(ctx context.Context, key string, opt cluster.GetOpt) ([]cluster.KeyValue, int64, error) {
	s := k.s
	var kvs []cluster.KeyValue
	var rev int64
	err := k.get(ctx, func() {
		rev = s.rev
		switch {
		case opt&cluster.ByCreate != 0: // an election line
			for _, kv := range s.lines[key] {
				kvs = append(kvs, kv.value())
			}
		case opt&cluster.Prefix != 0:
			for k, kv := range s.kv {
				if strings.HasPrefix(k, key) {
					kvs = append(kvs, kv.value())
				}
			}
			slices.SortFunc(kvs, func(a, b cluster.KeyValue) int { return strings.Compare(a.Key, b.Key) })
		default:
			if kv := s.kv[key]; kv != nil {
				kvs = append(kvs, kv.value())
			}
		}
	})
	return kvs, rev, err
}

func (kv *csKV) value() cluster.KeyValue {
	return cluster.KeyValue{Key: kv.key, Value: []byte(kv.val), CreateRevision: kv.create}
}

// Watch registers at the server one way after the call and hands every
// event to fn as it arrives (one per call: the model's transactions put
// one key a watcher wants).
func (k simKV) Watch(ctx context.Context, key string, prefix bool, rev int64, fn func([]cluster.Event)) error {
	s, p := k.s, k.s.cur
	w := &csWatcher{a: k.a, key: key, prefix: prefix, on: func() { s.ready(p) }}
	defer s.unregister(w)
	failed := false
	s.at(s.oneWay(), func() {
		if !s.down && !w.closed && !s.register(w, rev, s.now) {
			failed = true
			s.ready(p)
		}
	})
	for {
		if err := s.await(ctx, func() bool { return len(w.got) > 0 || failed }); err != nil {
			return err
		}
		if failed {
			return errCompacted
		}
		evs := w.got
		w.got = nil
		for _, h := range evs {
			fn([]cluster.Event{h.ev})
		}
	}
}

func (k simKV) Session(ctx context.Context, lease int64) (cluster.Session, error) {
	ss := &simSession{k: k, lease: lease}
	ss.alive(k.s.now)
	k.s.keepalive(ss)
	return ss, nil
}

// simSession is a session on the model: clientv3 renews its lease every
// TTL/3, and the session ends when a renewal finds the lease gone, or
// when TTL passes without an answer (etcd lost).
type simSession struct {
	k        simKV
	lease    int64
	deadline time.Duration
	ended    bool
	waiter   *proc
}

func (ss *simSession) Lease() int64 { return ss.lease }

// alive takes an answer sent at: the lease lives a TTL from then.
func (ss *simSession) alive(at time.Duration) {
	s := ss.k.s
	ss.deadline = at + time.Duration(s.o.TTL)*time.Second
	s.at(ss.deadline-s.now, func() {
		if s.now >= ss.deadline {
			ss.end()
		}
	})
}

func (ss *simSession) end() {
	ss.ended = true
	ss.k.s.ready(ss.waiter)
}

func (ss *simSession) Wait(ctx context.Context) {
	ss.waiter = ss.k.s.cur
	ss.k.s.await(ctx, func() bool { return ss.ended })
	ss.waiter = nil
	ss.ended = true // a session that is left ends (its keepalives stop)
}

// keepalive is clientv3's renewal, every TTL/3.
func (s *clusterSim) keepalive(ss *simSession) {
	every := time.Duration(s.o.TTL) * time.Second / 3
	s.at(every, func() {
		a := ss.k.a
		if ss.ended || a.dead {
			return
		}
		if s.inWindow() {
			s.keepalives++
		}
		sent := s.now
		s.at(s.oneWay(), func() {
			l := s.leases[ss.lease]
			if s.down {
				return
			}
			found := l != nil && !l.revoked
			if found {
				l.expiry = s.now + time.Duration(s.o.TTL)*time.Second
			}
			s.answer(a, s.now, func() {
				if !found {
					ss.end()
				} else if !ss.ended {
					ss.alive(sent)
				}
			})
		})
		s.keepalive(ss)
	})
}

// Campaign is concurrency.Election.Campaign: put the candidate's key
// (under the lease) if absent, then wait until every key created before
// it is gone; when ctx ends first, resign (delete the key) and fail.
func (ss *simSession) Campaign(ctx context.Context, prefix, val string) (cluster.Election, error) {
	k, s := ss.k, ss.k.s
	e := &simElection{k: k, key: fmt.Sprintf("%s/%x", prefix, ss.lease)}
	err := k.call(ctx, &csReq{apply: func(at time.Duration) {
		if kv := s.kv[e.key]; kv != nil {
			e.rev = kv.create
			return
		}
		s.newRev()
		e.rev = s.rev
		s.put(e.key, val, s.leases[ss.lease], at)
	}})
	if err != nil {
		return nil, err
	}
	if err := e.waitDeletes(ctx, prefix+"/"); err != nil {
		if ctx.Err() != nil {
			e.Resign(context.Background())
		}
		return nil, err
	}
	e.won = true
	return e, nil
}

type simElection struct {
	k   simKV
	key string
	rev int64
	won bool
}

func (e *simElection) Key() string { return e.key }
func (e *simElection) Rev() int64  { return e.rev }

// Resign of a won election is a handover (Node.balance): the model
// counts them.
func (e *simElection) Resign(ctx context.Context) error {
	s := e.k.s
	if e.won && (s.now < s.o.KillAt || s.o.KillAt == 0) {
		s.handovers++
		s.lastHandover = s.now
		if s.inWindow() {
			s.handoversWin++
		}
	}
	return e.k.call(ctx, &csReq{apply: func(at time.Duration) {
		s.newRev()
		if kv := s.kv[e.key]; kv != nil && kv.create == e.rev {
			s.del(kv, at)
		}
	}})
}

// waitDeletes is concurrency's: read the newest key of the line created
// before ours; none, and we lead; else wait for its deletion and look
// again.
func (e *simElection) waitDeletes(ctx context.Context, line string) error {
	s := e.k.s
	for {
		var pred string
		var rev int64
		err := e.k.get(ctx, func() {
			rev = s.rev
			for _, kv := range s.lines[line] {
				if kv.create < e.rev {
					pred = kv.key
				}
			}
		})
		if err != nil {
			return err
		}
		if pred == "" {
			return nil
		}
		gone := false
		wctx, cancel := simRT{s, e.k.a}.WithCancel(ctx)
		err = e.k.Watch(wctx, pred, false, rev, func(evs []cluster.Event) {
			if evs[0].Deleted {
				gone = true
				cancel()
			}
		})
		cancel()
		if !gone {
			return err
		}
	}
}
