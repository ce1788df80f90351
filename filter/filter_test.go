package filter

import (
	"math"
	"testing"
)

var (
	nan  = math.NaN()
	pinf = math.Inf(1)
	ninf = math.Inf(-1)
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

func TestNewEWMARejectsBadAlpha(t *testing.T) {
	for _, a := range []float64{0, -0.1, 1.0001, nan, pinf} {
		if _, err := NewEWMA(a); err == nil {
			t.Errorf("NewEWMA(%v): want error", a)
		}
	}
	for _, a := range []float64{1e-9, 0.15, 0.25, 1} {
		if _, err := NewEWMA(a); err != nil {
			t.Errorf("NewEWMA(%v): %v", a, err)
		}
	}
}

func TestEWMA(t *testing.T) {
	tests := []struct {
		name  string
		alpha float64
		in    []float64
		want  float64
		ok    bool
	}{
		{"no samples", 0.25, nil, 0, false},
		{"first sample initialises", 0.25, []float64{40}, 40, true},
		{"thesis alpha", 0.25, []float64{40, 0}, 30, true},
		{"two steps", 0.5, []float64{0, 8, 8}, 6, true},
		{"alpha one tracks input", 1, []float64{3, 9, 4}, 4, true},
		{"NaN ignored", 0.25, []float64{40, nan, 0}, 30, true},
		{"Inf ignored", 0.25, []float64{40, pinf, ninf, 0}, 30, true},
		{"only NaN stays undefined", 0.25, []float64{nan, nan}, 0, false},
		{"NaN before first sample", 0.25, []float64{nan, 12}, 12, true},
		{"constant input is a fixed point", 0.15, []float64{7, 7, 7, 7}, 7, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := NewEWMA(tc.alpha)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range tc.in {
				e.Update(x)
			}
			got, ok := e.Value()
			if ok != tc.ok || !near(got, tc.want) {
				t.Errorf("got (%v, %v), want (%v, %v)", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestEWMAReset(t *testing.T) {
	e, _ := NewEWMA(0.25)
	e.Update(10)
	e.Reset()
	if _, ok := e.Value(); ok {
		t.Fatal("Reset left a value")
	}
	if v, _ := e.Update(2); v != 2 {
		t.Fatalf("after Reset the first sample must initialise, got %v", v)
	}
}
