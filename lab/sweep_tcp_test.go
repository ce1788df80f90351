package lab

import "testing"

func TestPointTCP(t *testing.T) {
	// Two delays, two repeats: steps d0 d1 d0 d1, cumulative counters at
	// each change and at the end.
	marks := []TCPCounters{{RetransSegs: 0}, {RetransSegs: 1, LossProbes: 1}, {RetransSegs: 1, LossProbes: 1}, {RetransSegs: 4, LossProbes: 2}, {RetransSegs: 9, LossProbes: 2}}
	for _, c := range []struct {
		name  string
		marks []TCPCounters
		i     int
		want  *TCPCounters
	}{
		{"first delay: steps 0 and 2", marks, 0, &TCPCounters{RetransSegs: 4, LossProbes: 2}},
		{"second delay: steps 1 and 3, the last to the end", marks, 1, &TCPCounters{RetransSegs: 5}},
		{"an event that did not run", marks[:4], 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := pointTCP(c.marks, 2, 2, c.i)
			if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}
