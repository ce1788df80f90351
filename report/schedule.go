package report

import (
	"cmp"
	"time"
)

// Schedule is the controlled experiments' on/off pattern, the lab's and
// the simulator's: Lead with the reader alone, then Cycles of the load
// on for On and off for Off, then Tail.
type Schedule struct {
	Lead, On, Off, Tail time.Duration
	Cycles              int
}

// ControlledSchedule is the thesis' pattern, 20 s lead, six cycles of
// 25 s on and 5 s off, 10 s tail, its times scaled by scale and its
// cycles cycles unless 0.
func ControlledSchedule(scale func(time.Duration) time.Duration, cycles int) Schedule {
	return Schedule{Lead: scale(20 * time.Second), On: scale(25 * time.Second), Off: scale(5 * time.Second), Tail: scale(10 * time.Second),
		Cycles: cmp.Or(cycles, 6)}
}

// End is when the last cycle ends; Length is the whole phase.
func (s Schedule) End() time.Duration    { return s.Start(s.Cycles) }
func (s Schedule) Length() time.Duration { return s.End() + s.Tail }

// Start is cycle c's on-step.
func (s Schedule) Start(c int) time.Duration { return s.Lead + time.Duration(c)*(s.On+s.Off) }

// Steps are the on-steps' times (s).
func (s Schedule) Steps() []float64 {
	var out []float64
	for c := 0; c < s.Cycles; c++ {
		out = append(out, s.Start(c).Seconds())
	}
	return out
}
