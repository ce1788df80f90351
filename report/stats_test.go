package report

import (
	"math"
	"testing"
)

func TestDescribe(t *testing.T) {
	d := Describe([]float64{5, 1, math.NaN(), 3, 2, 4})
	want := Dist{N: 5, Mean: 3, P50: 3, P95: 4.8, Max: 5}
	if math.Abs(d.P95-want.P95) > 1e-9 || d.N != want.N || d.Mean != want.Mean || d.P50 != want.P50 || d.Max != want.Max {
		t.Fatalf("got %+v want %+v", d, want)
	}
	if (Describe(nil) != Dist{}) {
		t.Fatal("empty sample not zero")
	}
}

func TestJain(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{[]float64{10, 10, 10, 10}, 1}, {[]float64{40, 0, 0, 0}, 0.25}, {[]float64{1, 2}, 0.9}} {
		if got := Jain(tc.xs); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Jain(%v) = %v want %v", tc.xs, got, tc.want)
		}
	}
}

func TestLinearFit(t *testing.T) {
	a, b, r2 := LinearFit([]float64{0, 1, 2, 3}, []float64{1, 3, 5, 7})
	if a != 1 || b != 2 || r2 != 1 {
		t.Fatalf("a=%v b=%v r2=%v", a, b, r2)
	}
	_, _, r2 = LinearFit([]float64{0, 1, 2, 3}, []float64{0, 1, 0, 1})
	if r2 > 0.3 {
		t.Fatalf("noise r2 %v", r2)
	}
}

func TestMeanStderr(t *testing.T) {
	m, se := MeanStderr([]float64{2, 4, 6})
	if m != 4 || math.Abs(se-2/math.Sqrt(3)) > 1e-12 {
		t.Fatalf("%v %v", m, se)
	}
}
