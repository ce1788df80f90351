package throttle

import (
	"math"
	"time"
)

// LateBounds are the upper bounds of Lateness's buckets. A release a few
// tens of µs late is the wake-up itself; one a few ms late means the delay
// line did not get the CPU in time, and every held packet of the consumer
// took that much more than its delay (srtt and the sender's loss-probe
// timer see it too). The last bound is below max_delay's usual range, so
// the overflow bucket is unmistakably starvation.
var LateBounds = [...]time.Duration{
	50 * time.Microsecond,
	100 * time.Microsecond,
	250 * time.Microsecond,
	500 * time.Microsecond,
	time.Millisecond,
	2 * time.Millisecond,
	4 * time.Millisecond,
	8 * time.Millisecond,
	16 * time.Millisecond,
}

// Lateness is a histogram of how late held packets left against their due
// time. Fixed-size arrays so a copy (Stats) shares nothing with the line.
type Lateness struct {
	// Counts[i] counts releases at most LateBounds[i] late (and more than
	// the bound before); the last element counts the rest.
	Counts [len(LateBounds) + 1]uint64 `json:"counts"`
	Count  uint64                      `json:"count"`
	Sum    time.Duration               `json:"sum_ns"`
	Max    time.Duration               `json:"max_ns"`
}

func (l *Lateness) observe(ns int64) {
	d := time.Duration(max(ns, 0))
	i := 0
	for i < len(LateBounds) && d > LateBounds[i] {
		i++
	}
	l.Counts[i]++
	l.Count++
	l.Sum += d
	l.Max = max(l.Max, d)
}

// Add returns the sum of two histograms (several delay lines or runs).
func (l Lateness) Add(o Lateness) Lateness {
	for i := range l.Counts {
		l.Counts[i] += o.Counts[i]
	}
	l.Count += o.Count
	l.Sum += o.Sum
	l.Max = max(l.Max, o.Max)
	return l
}

// Sub returns the releases counted in l since an earlier reading o of the
// same histogram. Max stays l's: a maximum cannot be taken back out.
func (l Lateness) Sub(o Lateness) Lateness {
	for i := range l.Counts {
		l.Counts[i] -= o.Counts[i]
	}
	l.Count -= o.Count
	l.Sum -= o.Sum
	return l
}

// Quantile returns the upper bound of the bucket holding quantile q, or Max
// if that is the overflow bucket or smaller (so never more than was seen).
// It returns 0 for an empty histogram.
func (l Lateness) Quantile(q float64) time.Duration {
	if l.Count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(l.Count)))
	rank = min(max(rank, 1), l.Count)
	var seen uint64
	for i, n := range l.Counts {
		seen += n
		if seen >= rank {
			if i < len(LateBounds) {
				return min(LateBounds[i], l.Max)
			}
			break
		}
	}
	return l.Max
}

// Over returns the fraction of releases later than bound, which should be
// one of LateBounds: between two, the histogram counts the bucket that
// straddles it as over.
func (l Lateness) Over(bound time.Duration) float64 {
	if l.Count == 0 {
		return 0
	}
	var n uint64
	for i, c := range l.Counts {
		if i == len(LateBounds) || LateBounds[i] > bound {
			n += c
		}
	}
	return float64(n) / float64(l.Count)
}
