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

// Reference t and df computed independently (Python's statistics module);
// the 99 % CI half-width must lie between the tabulated t quantiles for
// df 7 (3.499) and df 8 (3.355) times the standard error.
func TestWelchTest(t *testing.T) {
	a := []float64{7.1, 7.2, 7.3, 7.15, 7.25}
	b := []float64{7.3, 7.35, 7.4, 7.2, 7.5}
	w := WelchTest(a, b, 0.99)
	if math.Abs(w.Diff-0.15) > 1e-9 || math.Abs(w.T-2.44949) > 1e-4 || math.Abs(w.DF-7.2) > 1e-9 {
		t.Fatalf("%+v", w)
	}
	se := w.Diff / w.T
	half := (w.CI[1] - w.CI[0]) / 2
	if half < 3.355*se || half > 3.499*se || math.Abs((w.CI[0]+w.CI[1])/2-w.Diff) > 1e-9 {
		t.Fatalf("ci %v (se %v)", w.CI, se)
	}
	if w.P < 0.01 || w.P > 0.05 {
		t.Fatalf("p %v: t=2.45 at df 7.2 lies between the 0.05 and 0.01 two-sided critical values", w.P)
	}
}

// R's t.test(c(0.1, 0.3, 0.2, 0.4, 0.0)) gives mean 0.2, t = 2.828427,
// df 4, 99 % CI [−0.1256, 0.5256] (qt(0.995, 4) = 4.604095), p 0.04742.
func TestPairedT(t *testing.T) {
	w := PairedT([]float64{0.1, 0.3, 0.2, 0.4, 0.0}, 0.99)
	if math.Abs(w.Diff-0.2) > 1e-12 || math.Abs(w.T-2.828427) > 1e-5 || w.DF != 4 {
		t.Fatalf("%+v", w)
	}
	if math.Abs(w.CI[0]+0.12556) > 1e-4 || math.Abs(w.CI[1]-0.52556) > 1e-4 {
		t.Fatalf("ci %v", w.CI)
	}
	if math.Abs(w.P-0.04742) > 1e-4 {
		t.Fatalf("p %v", w.P)
	}
	if one := PairedT([]float64{0.5}, 0.99); one.P != 1 || one.CI != [2]float64{0.5, 0.5} {
		t.Fatalf("one pair: %+v", one)
	}
}
