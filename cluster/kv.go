package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// KV is what a Node asks of etcd, and Runtime how it starts goroutines,
// waits and reads the clock. The daemon runs them on etcd's client and
// the Go runtime (Etcd, RealTime); package sim runs the same Node on a
// model of etcd in virtual time, through the same two interfaces, so
// what it measures is this package's code.
type KV interface {
	// Grant makes a lease of ttl seconds; Revoke ends one (best effort).
	Grant(ctx context.Context, ttl int64) (int64, error)
	Revoke(ctx context.Context, lease int64)
	// Session keeps lease alive until ctx ends or the lease is lost.
	Session(ctx context.Context, lease int64) (Session, error)
	// Get reads key, or the keys under it with Prefix, optionally in
	// the order of their creation (ByCreate), and the store's revision.
	Get(ctx context.Context, key string, opt GetOpt) ([]KeyValue, int64, error)
	// Watch calls fn with each batch of changes to key (or under it,
	// with prefix) from revision rev on, until ctx ends or the watch
	// fails (etcd lost its leader or compacted past rev).
	Watch(ctx context.Context, key string, prefix bool, rev int64, fn func([]Event)) error
	// Txn writes puts under lease in one transaction; ok[i] says whether
	// puts[i] was written (a fenced put is not once its fence fell).
	Txn(ctx context.Context, lease int64, puts []Put) (ok []bool, err error)
}

// GetOpt are Get's options.
type GetOpt uint8

const (
	Prefix   GetOpt = 1 << iota // every key under key
	ByCreate                    // in the order of their creation
)

// KeyValue is one key as read or watched.
type KeyValue struct {
	Key            string
	Value          []byte
	CreateRevision int64
}

// Event is one change a watch reports.
type Event struct {
	KeyValue
	Deleted bool
}

// Put is one write of a Txn. With a FenceKey it is a nested transaction,
// written only while FenceKey stands with create revision FenceRev (a
// leader's election key: see Node.publishOnce).
type Put struct {
	Key, Value string
	FenceKey   string
	FenceRev   int64
}

// Session is a lease kept alive: its campaigns run under it.
type Session interface {
	Lease() int64
	// Wait returns when the session ends (its lease lost) or ctx does.
	Wait(ctx context.Context)
	// Campaign is concurrency.Election.Campaign on the election prefix:
	// it returns once every earlier candidate's key is gone, or deletes
	// its own key and fails when ctx ends first.
	Campaign(ctx context.Context, prefix, val string) (Election, error)
}

// Election is a won campaign: its key, the key's create revision, and
// Resign, which deletes the key.
type Election interface {
	Key() string
	Rev() int64
	Resign(ctx context.Context) error
}

// Runtime is how a Node starts goroutines, waits and reads the clock.
// Every wait of a Node goes through it or through KV, and every context
// it derives, so a runtime on virtual time knows when each goroutine is
// blocked and on what.
type Runtime interface {
	Now() time.Time
	Go(f func())
	WithCancel(ctx context.Context) (context.Context, context.CancelFunc)
	WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
	// NewWake is a wake-up signal for Sleep that keeps one pending call.
	NewWake() Wake
	// Sleep waits d, until ctx ends, or until w (if not nil) is woken.
	Sleep(ctx context.Context, d time.Duration, w Wake)
	// Jitter is a random duration in [0, d].
	Jitter(d time.Duration) time.Duration
}

// Forever is a Sleep without a timeout.
const Forever = time.Duration(1<<63 - 1)

// Wake wakes a Sleep.
type Wake interface{ Wake() }

// RealTime is the Runtime of the daemon: goroutines, timers, the wall
// clock.
type RealTime struct{}

func (RealTime) Now() time.Time { return time.Now() }
func (RealTime) Go(f func())    { go f() }
func (RealTime) WithCancel(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}
func (RealTime) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}
func (RealTime) NewWake() Wake                        { return make(wake, 1) }
func (RealTime) Jitter(d time.Duration) time.Duration { return rand.N(d + 1) }
func (RealTime) Sleep(ctx context.Context, d time.Duration, w Wake) {
	t := time.NewTimer(d)
	defer t.Stop()
	var c chan struct{}
	if w != nil {
		c = w.(wake)
	}
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-c:
	}
}

type wake chan struct{}

func (w wake) Wake() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// Etcd is the KV of an etcd client.
func Etcd(c *clientv3.Client) KV { return etcdKV{c} }

type etcdKV struct{ c *clientv3.Client }

func (e etcdKV) Grant(ctx context.Context, ttl int64) (int64, error) {
	r, err := e.c.Grant(ctx, ttl)
	if err != nil {
		return 0, err
	}
	return int64(r.ID), nil
}

func (e etcdKV) Revoke(ctx context.Context, lease int64) { e.c.Revoke(ctx, clientv3.LeaseID(lease)) }

func (e etcdKV) Session(ctx context.Context, lease int64) (Session, error) {
	s, err := concurrency.NewSession(e.c, concurrency.WithLease(clientv3.LeaseID(lease)), concurrency.WithContext(ctx))
	return etcdSession{s}, err
}

func (e etcdKV) Get(ctx context.Context, key string, opt GetOpt) ([]KeyValue, int64, error) {
	var opts []clientv3.OpOption
	if opt&Prefix != 0 {
		opts = append(opts, clientv3.WithPrefix())
	}
	if opt&ByCreate != 0 {
		opts = append(opts, clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	}
	resp, err := e.c.Get(ctx, key, opts...)
	if err != nil {
		return nil, 0, err
	}
	kvs := make([]KeyValue, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		kvs[i] = KeyValue{Key: string(kv.Key), Value: kv.Value, CreateRevision: kv.CreateRevision}
	}
	return kvs, resp.Header.Revision, nil
}

func (e etcdKV) Watch(ctx context.Context, key string, prefix bool, rev int64, fn func([]Event)) error {
	opts := []clientv3.OpOption{clientv3.WithRev(rev)}
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range e.c.Watch(wctx, key, opts...) {
		if err := wr.Err(); err != nil {
			return err
		}
		evs := make([]Event, len(wr.Events))
		for i, ev := range wr.Events {
			evs[i] = Event{KeyValue{Key: string(ev.Kv.Key), Value: ev.Kv.Value, CreateRevision: ev.Kv.CreateRevision}, ev.Type == clientv3.EventTypeDelete}
		}
		fn(evs)
	}
	return ctx.Err()
}

func (e etcdKV) Txn(ctx context.Context, lease int64, puts []Put) ([]bool, error) {
	ops := make([]clientv3.Op, len(puts))
	for i, p := range puts {
		put := clientv3.OpPut(p.Key, p.Value, clientv3.WithLease(clientv3.LeaseID(lease)))
		if p.FenceKey == "" {
			ops[i] = put
			continue
		}
		fence := clientv3.Compare(clientv3.CreateRevision(p.FenceKey), "=", p.FenceRev)
		ops[i] = clientv3.OpTxn([]clientv3.Cmp{fence}, []clientv3.Op{put}, nil)
	}
	resp, err := e.c.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	if len(resp.Responses) != len(puts) {
		return nil, fmt.Errorf("etcd answered %d operations of %d", len(resp.Responses), len(puts))
	}
	ok := make([]bool, len(puts))
	for i, p := range puts {
		ok[i] = p.FenceKey == "" || resp.Responses[i].GetResponseTxn().GetSucceeded()
	}
	return ok, nil
}

type etcdSession struct{ s *concurrency.Session }

func (s etcdSession) Lease() int64 { return int64(s.s.Lease()) }

func (s etcdSession) Wait(ctx context.Context) {
	select {
	case <-s.s.Done():
	case <-ctx.Done():
	}
}

func (s etcdSession) Campaign(ctx context.Context, prefix, val string) (Election, error) {
	e := concurrency.NewElection(s.s, prefix)
	if err := e.Campaign(ctx, val); err != nil {
		return nil, err
	}
	return e, nil
}
