package throttle

import (
	"testing"
	"time"
)

func TestLateness(t *testing.T) {
	us := func(n int64) int64 { return n * 1e3 }
	tests := []struct {
		name     string
		obs      []int64 // ns
		p50, p99 time.Duration
		max      time.Duration
		over1ms  float64
		bucket0  uint64 // releases at most 50 µs late
		overflow uint64 // more than 16 ms late
	}{
		{name: "empty"},
		{
			name: "negative is on time", obs: []int64{-5, 0, us(50)},
			p50: 50 * time.Microsecond, p99: 50 * time.Microsecond, max: 50 * time.Microsecond,
			bucket0: 3,
		},
		{
			name: "typical wake-ups", obs: []int64{us(20), us(30), us(80), us(120), us(900)},
			p50: 100 * time.Microsecond, p99: 900 * time.Microsecond, max: 900 * time.Microsecond,
			bucket0: 2,
		},
		{
			name: "starved", obs: []int64{us(40), us(3000), us(25000), us(40000)},
			p50: 4 * time.Millisecond, p99: 40 * time.Millisecond, max: 40 * time.Millisecond,
			over1ms: 0.75, bucket0: 1, overflow: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l Lateness
			for _, ns := range tt.obs {
				l.observe(ns)
			}
			if l.Count != uint64(len(tt.obs)) {
				t.Errorf("Count %d, want %d", l.Count, len(tt.obs))
			}
			if got := l.Quantile(0.5); got != tt.p50 {
				t.Errorf("p50 %v, want %v", got, tt.p50)
			}
			if got := l.Quantile(0.99); got != tt.p99 {
				t.Errorf("p99 %v, want %v", got, tt.p99)
			}
			if l.Max != tt.max {
				t.Errorf("Max %v, want %v", l.Max, tt.max)
			}
			if got := l.Over(time.Millisecond); got != tt.over1ms {
				t.Errorf("Over(1ms) %v, want %v", got, tt.over1ms)
			}
			if l.Counts[0] != tt.bucket0 || l.Counts[len(LateBounds)] != tt.overflow {
				t.Errorf("counts %v: want %d in the first bucket, %d over", l.Counts, tt.bucket0, tt.overflow)
			}
		})
	}
}

func TestLatenessAdd(t *testing.T) {
	var a, b Lateness
	a.observe(10e3)
	b.observe(30e6)
	b.observe(70e3)
	s := a.Add(b)
	if s.Count != 3 || s.Max != 30*time.Millisecond || s.Sum != 30_080*time.Microsecond {
		t.Errorf("sum %+v", s)
	}
	if a.Count != 1 {
		t.Errorf("Add changed its receiver: %+v", a)
	}
	if d := s.Sub(a); d.Count != b.Count || d.Counts != b.Counts || d.Sum != b.Sum || d.Max != s.Max {
		t.Errorf("(a+b)-a = %+v, want b's counts %+v with the cumulative max", d, b)
	}
}
