package report

import (
	"math"

	"github.com/sanqos/sanqos/sample"
)

// Tick is one sampling interval of a run, per host: what a lab phase
// records from diskstats and what the simulator synthesises, so that one
// set of helpers summarises both.
type Tick struct {
	T   float64                    // seconds since the phase started, at the interval's end
	Dev map[string]sample.Interval // by host
}

func (t Tick) tick() Tick { return t }

// Ticker is a Tick, or a struct embedding one (the simulator's tick also
// carries the delay it applied).
type Ticker interface{ tick() Tick }

// Values returns f of host's interval in each tick; a tick without one
// (the device was being re-baselined) is skipped, never counted as zero.
func Values[T Ticker](ticks []T, host string, f func(sample.Interval) float64) []float64 {
	var v []float64
	for _, t := range ticks {
		if iv, ok := t.tick().Dev[host]; ok {
			v = append(v, f(iv))
		}
	}
	return v
}

// Aggregate averages, over ticks, the sum of f across hosts (an aggregate
// rate); NaN without ticks.
func Aggregate[T Ticker](ticks []T, hosts []string, f func(sample.Interval) float64) float64 {
	if len(ticks) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, t := range ticks {
		sum += hostSum(t.tick(), hosts, f)
	}
	return sum / float64(len(ticks))
}

// AggregateSeries is the sum of f across hosts in each tick, against time.
func AggregateSeries[T Ticker](ticks []T, hosts []string, f func(sample.Interval) float64) (x, y []float64) {
	for _, t := range ticks {
		x = append(x, t.tick().T)
		y = append(y, hostSum(t.tick(), hosts, f))
	}
	return x, y
}

func hostSum(t Tick, hosts []string, f func(sample.Interval) float64) float64 {
	var s float64
	for _, h := range hosts {
		if iv, ok := t.Dev[h]; ok {
			s += f(iv)
		}
	}
	return s
}
