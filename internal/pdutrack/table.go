// Package pdutrack is what the passive trackers of iSCSI (iscsipdu) and
// NVMe/TCP (nvmetcp) share: a capped table of connections, each with its
// outstanding commands by tag; the latency per key of those completed;
// and a stream direction's bounded buffer and parse loop. Each protocol
// keeps its own header parsing and what a connection remembers.
//
// Imports (sanqos): none.
package pdutrack

import "time"

// Counters are a tracker's cumulative counts, for diagnostics.
type Counters struct {
	Commands, Completed int
	Unmatched           int // completions whose tag no command had
	Dropped             int // commands not remembered (table full)
	Expired             int // commands never answered
	Resyncs             int // bytes skipped resynchronising
	FlowsRefused        int
}

// Add sums two trackers' counters.
func (c Counters) Add(o Counters) Counters {
	return Counters{c.Commands + o.Commands, c.Completed + o.Completed, c.Unmatched + o.Unmatched, c.Dropped + o.Dropped,
		c.Expired + o.Expired, c.Resyncs + o.Resyncs, c.FlowsRefused + o.FlowsRefused}
}

// Stat is the latency of one key's commands since the last Take.
type Stat struct {
	Count    int
	Sum, Max time.Duration
}

// Mean is the mean latency (0 without commands).
func (s Stat) Mean() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.Sum / time.Duration(s.Count)
}

// Stats are the latencies per key since the last Take.
type Stats[K comparable] map[K]Stat

// Add counts one command of key k.
func (s Stats[K]) Add(k K, lat time.Duration) {
	st := s[k]
	st.Count++
	st.Sum += lat
	st.Max = max(st.Max, lat)
	s[k] = st
}

// Take returns the latencies and starts anew (one call per control
// interval).
func (s *Stats[K]) Take() map[K]Stat {
	m := *s
	*s = Stats[K]{}
	return m
}

// Conn is one connection: the protocol's state C and the outstanding
// commands by tag T, each a P.
type Conn[T comparable, C, P any] struct {
	State C
	out   map[T]pending[P]
	last  time.Time
}

type pending[P any] struct {
	p  P
	at time.Time
}

// Outstanding is how many commands await their completion.
func (c *Conn[T, C, P]) Outstanding() int { return len(c.out) }

// Table is the connections by flow F. Not safe for concurrent use: a
// capture loop owns it.
type Table[F, T comparable, C, P any] struct {
	Counters
	Flows          map[F]*Conn[T, C, P]
	maxFlows       int // connections tracked; further ones are refused until others close or expire
	maxOutstanding int // commands per connection; further ones are not timed
	newState       func() C
}

// NewTable caps connections at maxFlows (0: 65536) and commands at
// maxOutstanding per connection (0: 4096, above any sane queue depth);
// newState makes a new connection's state.
func NewTable[F, T comparable, C, P any](maxFlows, maxOutstanding int, newState func() C) *Table[F, T, C, P] {
	if maxOutstanding <= 0 {
		maxOutstanding = 4096
	}
	if maxFlows <= 0 {
		maxFlows = 65536
	}
	return &Table[F, T, C, P]{Flows: map[F]*Conn[T, C, P]{}, maxFlows: maxFlows, maxOutstanding: maxOutstanding, newState: newState}
}

// Conn returns f's connection, seen at ts, made if new; nil when the
// table is full.
func (t *Table[F, T, C, P]) Conn(f F, ts time.Time) *Conn[T, C, P] {
	c := t.Flows[f]
	if c == nil {
		if len(t.Flows) >= t.maxFlows {
			t.FlowsRefused++
			return nil
		}
		c = &Conn[T, C, P]{State: t.newState(), out: map[T]pending[P]{}}
		t.Flows[f] = c
	}
	c.last = ts
	return c
}

// Start remembers command tag of c, seen at ts, unless c has too many
// outstanding; a repeated tag replaces its command.
func (t *Table[F, T, C, P]) Start(c *Conn[T, C, P], tag T, p P, ts time.Time) {
	if _, dup := c.out[tag]; !dup && len(c.out) >= t.maxOutstanding {
		t.Dropped++
		return
	}
	c.out[tag] = pending[P]{p, ts}
}

// Finish ends command tag of c at ts: what it was and its latency; ok
// false when no command had the tag.
func (t *Table[F, T, C, P]) Finish(c *Conn[T, C, P], tag T, ts time.Time) (p P, lat time.Duration, ok bool) {
	pd, ok := c.out[tag]
	if !ok {
		t.Unmatched++
		return p, 0, false
	}
	delete(c.out, tag)
	t.Completed++
	return pd.p, ts.Sub(pd.at), true
}

// Close forgets a connection (FIN or RST seen).
func (t *Table[F, T, C, P]) Close(f F) {
	if c := t.Flows[f]; c != nil {
		t.Expired += len(c.out)
		delete(t.Flows, f)
	}
}

// Expire forgets commands older than maxAge (lost responses, or a capture
// that missed them) and connections silent for as long, but for those
// keep (optional) keeps.
func (t *Table[F, T, C, P]) Expire(now time.Time, maxAge time.Duration, keep func(C) bool) {
	for f, c := range t.Flows {
		if now.Sub(c.last) > maxAge && (keep == nil || !keep(c.State)) {
			t.Close(f)
			continue
		}
		for tag, p := range c.out {
			if now.Sub(p.at) > maxAge {
				delete(c.out, tag)
				t.Expired++
			}
		}
	}
}
