package sim

import (
	"context"
	"runtime"
	"time"

	"github.com/sanqos/sanqos/cluster"
)

// The modelled agents run the real cluster.Node, goroutines and all, on
// virtual time: its goroutines start through simRT.Go and block only in
// simRT and simKV, which hand control back to the event loop. One
// goroutine runs at a time, the next being the first made ready (a FIFO
// queue), so a seed gives one run, and the model's state needs no lock.

// proc is one goroutine of a modelled Node.
type proc struct {
	a      *csAgent
	wake   chan struct{}
	queued bool
	done   bool
}

// spawn starts f as a proc of agent a; it first runs when the event loop
// drains the ready queue.
func (s *clusterSim) spawn(a *csAgent, f func()) {
	p := &proc{a: a, wake: make(chan struct{})}
	s.procs = append(s.procs, p)
	go func() {
		defer func() { p.done = true; s.back <- struct{}{} }()
		<-p.wake
		if !s.ending {
			f()
		}
	}()
	s.ready(p)
}

func (s *clusterSim) ready(p *proc) {
	if p != nil && !p.queued && !s.ending {
		p.queued = true
		s.runq = append(s.runq, p)
	}
}

// drain runs the ready procs, each until it blocks again. A dead agent's
// procs never run again. The time each runs is its agent's CPU.
func (s *clusterSim) drain() {
	for len(s.runq) > 0 {
		p := s.runq[0]
		s.runq = s.runq[1:]
		p.queued = false
		if p.a.dead || p.done {
			continue
		}
		prev := s.cur
		s.cur = p
		t0 := time.Now()
		p.wake <- struct{}{}
		<-s.back
		if s.inWindow() {
			p.a.bgNs += int64(time.Since(t0))
		}
		s.cur = prev
	}
}

// park blocks the running proc until something readies it.
func (s *clusterSim) park() {
	p := s.cur
	s.back <- struct{}{}
	<-p.wake
	if s.ending {
		runtime.Goexit()
	}
}

// await parks the running proc until cond holds or ctx ends.
func (s *clusterSim) await(ctx context.Context, cond func() bool) error {
	p := s.cur
	sc := simCtxOf(ctx)
	if sc != nil {
		sc.waiters = append(sc.waiters, p)
		defer sc.drop(p)
	}
	for !cond() {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.park()
	}
	return nil
}

// end lets every proc go: each returns from where it blocks through
// runtime.Goexit, running its defers, one at a time.
func (s *clusterSim) end() {
	s.ending = true
	for _, p := range s.procs {
		if !p.done {
			p.wake <- struct{}{}
			<-s.back
		}
	}
	s.procs, s.runq = nil, nil
}

// simCtx is a context the model can cancel and whose waiters it wakes:
// Node derives every context through simRT, and a simCtx rides along as
// a value of the real one.
type simCtx struct {
	s       *clusterSim
	cancel  context.CancelFunc
	parent  *simCtx
	kids    []*simCtx
	waiters []*proc
	done    bool
}

type simCtxKey struct{}

func simCtxOf(ctx context.Context) *simCtx {
	sc, _ := ctx.Value(simCtxKey{}).(*simCtx)
	return sc
}

func (sc *simCtx) drop(p *proc) {
	for i, w := range sc.waiters {
		if w == p {
			sc.waiters = append(sc.waiters[:i], sc.waiters[i+1:]...)
			return
		}
	}
}

func (sc *simCtx) end() {
	if sc.done {
		return
	}
	sc.done = true
	sc.cancel()
	if pa := sc.parent; pa != nil {
		for i, k := range pa.kids {
			if k == sc {
				pa.kids = append(pa.kids[:i], pa.kids[i+1:]...)
				break
			}
		}
	}
	for _, p := range sc.waiters {
		sc.s.ready(p)
	}
	for _, k := range append([]*simCtx(nil), sc.kids...) {
		k.end()
	}
}

// simRT is cluster.Runtime on the model's clock, for agent a.
type simRT struct {
	s *clusterSim
	a *csAgent
}

func (r simRT) Now() time.Time { return r.s.clock() }
func (r simRT) Go(f func())    { r.s.spawn(r.a, f) }

func (r simRT) WithCancel(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	sc := &simCtx{s: r.s, cancel: cancel, parent: simCtxOf(parent)}
	if sc.parent != nil && !sc.parent.done {
		sc.parent.kids = append(sc.parent.kids, sc)
	}
	sc.done = ctx.Err() != nil
	return context.WithValue(ctx, simCtxKey{}, sc), sc.end
}

func (r simRT) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := r.WithCancel(parent)
	sc := simCtxOf(ctx)
	r.s.at(d, sc.end)
	return ctx, cancel
}

func (r simRT) Jitter(d time.Duration) time.Duration {
	return time.Duration(r.s.rng.Int64N(int64(d) + 1))
}

// simWake is a Wake on the model: one pending call, one sleeper.
type simWake struct {
	s       *clusterSim
	pending bool
	sleeper *proc
}

func (w *simWake) Wake() {
	w.pending = true
	w.s.ready(w.sleeper)
}

func (r simRT) NewWake() cluster.Wake { return &simWake{s: r.s} }

func (r simRT) Sleep(ctx context.Context, d time.Duration, w cluster.Wake) {
	s, p := r.s, r.s.cur
	var sw *simWake
	if w != nil {
		sw = w.(*simWake)
		sw.sleeper = p
		defer func() { sw.sleeper, sw.pending = nil, false }()
	}
	due := false
	if d < cluster.Forever/2 {
		s.at(max(d, 0), func() { due = true; s.ready(p) })
	}
	s.await(ctx, func() bool { return due || sw != nil && sw.pending })
}
