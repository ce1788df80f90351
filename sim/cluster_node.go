package sim

import (
	"iter"
	"time"

	"github.com/sanqos/sanqos/cluster"
)

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
	leads, share := cluster.Load(a.id, a.seats())
	var puts []csPut
	var slots []*csSlot
	var recs []*cluster.Shared
	for _, sl := range a.slots {
		if sl.Pending != nil && sl.Leading {
			b, _ := cluster.EncodeShared(sl.Pending)
			rec := sl.Pending
			r := sl.res
			puts = append(puts, csPut{key: cluster.DelayKey(s.prefix, sl.res.name), val: b, kind: kindDelay, res: sl.res,
				fence: sl, elec: sl.elec, landed: func() { s.trackRecord(r, rec) }})
			slots, recs = append(slots, sl), append(recs, rec)
			sl.Pending = nil
		}
		if sl.dirty && now.Sub(sl.lastPub) >= s.o.PublishEvery {
			ind := sl.Ind
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
				case ok && req.ok[i] && sl.Leading && sl.elec == req.puts[i].elec:
					sl.F.Confirm(*rs[i], at)
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

// seats are the Seats of the agent's slots, in order (Node.seats).
func (a *csAgent) seats() iter.Seq[*cluster.Seat] {
	return func(yield func(*cluster.Seat) bool) {
		for _, sl := range a.slots {
			if !yield(&sl.Seat) {
				return
			}
		}
	}
}

func (s *clusterSim) recvTime(a *csAgent, t0 time.Time) {
	if s.inWindow() {
		a.recvNs += int64(time.Since(t0))
	}
}

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
				sl.F.Receive(rec, false, s.clock())
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
	if sl.Receive(rec, true, now, sl.a.id, sl.campaigning) {
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

// closeTracks runs count on each of r's open records (it takes off need
// an agent that has applied the record, or never will), then closes those
// no agent still needs: propagated in the time the last one took.
func (s *clusterSim) closeTracks(r *csRes, count func(*csTrack)) {
	kept := r.tracks[:0]
	for _, tr := range r.tracks {
		count(tr)
		if tr.need <= 0 {
			s.recordsDone++
			s.sharedProp = append(s.sharedProp, ms(tr.max))
			continue
		}
		kept = append(kept, tr)
	}
	r.tracks = kept
}
