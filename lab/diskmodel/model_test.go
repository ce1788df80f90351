package diskmodel

import (
	"os"
	"testing"
	"time"
)

func TestService(t *testing.T) {
	p := Params{Seek: 5 * time.Millisecond, Overhead: 200 * time.Microsecond, Bandwidth: 40e6, WriteCost: 2}
	for _, tc := range []struct {
		name       string
		write, seq bool
		bytes      int
		want       time.Duration
	}{
		{"random 8k read", false, false, 8192, 5*time.Millisecond + 200*time.Microsecond + 204800*time.Nanosecond},
		{"sequential 64k read", false, true, 65536, 200*time.Microsecond + 1638400*time.Nanosecond},
		{"sequential 64k write pays the write cost", true, true, 65536, 200*time.Microsecond + 2*1638400*time.Nanosecond},
	} {
		if got := p.Service(tc.write, tc.seq, tc.bytes); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// FIFO: a request arriving while the server is busy completes one service
// time after the previous one, whichever file it belongs to.
func TestAdmitFIFOAcrossFiles(t *testing.T) {
	p := Params{Seek: 5 * time.Millisecond, Bandwidth: 1e6}
	d := New(p)
	t0 := time.Unix(0, 0)
	a := d.Admit(t0, false, 1, 0, 1000)                       // random: 5 ms + 1 ms
	b := d.Admit(t0.Add(time.Millisecond), false, 2, 0, 1000) // queued behind a
	c := d.Admit(t0.Add(time.Second), false, 1, 1000, 1000)   // idle server, sequential
	if want := t0.Add(6 * time.Millisecond); !a.Equal(want) {
		t.Fatalf("a done %v, want %v", a.Sub(t0), want.Sub(t0))
	}
	if want := a.Add(6 * time.Millisecond); !b.Equal(want) {
		t.Fatalf("b done %v, want %v", b.Sub(t0), want.Sub(t0))
	}
	if want := t0.Add(time.Second + time.Millisecond); !c.Equal(want) {
		t.Fatalf("c done %v, want %v (sequential, no seek)", c.Sub(t0), want.Sub(t0))
	}
	if s := d.Stats(); s.Requests != 3 || s.Sequential != 1 || s.Bytes != 3000 {
		t.Fatalf("stats %+v", s)
	}
}

// Interleaved sequential streams on one file each stay sequential.
func TestInterleavedStreams(t *testing.T) {
	d := New(Params{Seek: time.Millisecond, Bandwidth: 1e9})
	now := time.Unix(0, 0)
	for i := int64(0); i < 10; i++ {
		for s := int64(0); s < 4; s++ {
			d.Admit(now, true, 7, s<<30+i*65536, 65536)
		}
	}
	if st := d.Stats(); st.Sequential != 36 {
		t.Fatalf("sequential = %d, want 36 (first request of each of 4 streams seeks)", st.Sequential)
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultParams().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []Params{{Seek: -1, Bandwidth: 1e6, WriteCost: 1}, {Bandwidth: 10, WriteCost: 1}, {Bandwidth: 1e12, WriteCost: 1}, {Bandwidth: 1e6, WriteCost: 0.5}} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

// The log gives back, for a window, its admissions and the one before,
// with the time the server was then free: the queue at any instant.
func TestLogWindow(t *testing.T) {
	p := Params{Seek: 5 * time.Millisecond, Bandwidth: 1e6, WriteCost: 1}
	d := New(p)
	path := t.TempDir() + "/queue.bin"
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	d.LogTo(f)
	t0 := time.Unix(1000, 0)
	for i := range 5 {
		d.Admit(t0.Add(time.Duration(i)*time.Millisecond), false, 1, int64(i)*1e6, 0) // 5 ms each, random
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadLog(path, t0.Add(2*time.Millisecond), t0.Add(3*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{{t0.Add(time.Millisecond), t0.Add(10 * time.Millisecond)}, {t0.Add(2 * time.Millisecond), t0.Add(15 * time.Millisecond)},
		{t0.Add(3 * time.Millisecond), t0.Add(20 * time.Millisecond)}}
	if len(recs) != len(want) {
		t.Fatalf("records %v, want %v", recs, want)
	}
	for i := range want {
		if !recs[i].At.Equal(want[i].At) || !recs[i].Free.Equal(want[i].Free) {
			t.Errorf("record %d: %v, want %v", i, recs[i], want[i])
		}
	}
}
