package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/report"
)

// stallCase is one row of the tables matching counters to stalls.
type stallCase struct {
	name   string
	stalls []Stall
	want   report.ProbesAtStalls
}

// TestProbesAtStalls: loss probes are matched to the seconds they were
// counted in, a second counts as stalled if a stall episode of at least
// 8 ms overlaps it (widened by the sampling slack), and only the
// namespaces of the side asked for count. Times from read-backup
// s1-r1-c9882fa's 20 ms phase, whose two target probes came 17 s into a
// step; the stalls and the other side's probes are made up around them.
func TestProbesAtStalls(t *testing.T) {
	series := func(probes ...uint64) []TCPSample {
		var out []TCPSample
		for i, p := range probes {
			out = append(out, TCPSample{T: time.Duration(16+i) * time.Second, C: TCPCounters{LossProbes: p}})
		}
		return out
	}
	tcp := map[string][]TCPSample{
		"bm": series(3, 3, 4, 4, 6, 6),
		"b3": series(0, 0, 0, 5, 5, 5), // five probes in (18, 19] s
	}
	target := func(ns string) bool { return ns == "bm" }
	for _, tc := range []stallCase{
		{"no stalls", []Stall{}, report.ProbesAtStalls{At: 0, Of: 3}},
		{"a stall in the second of one probe", []Stall{{T: ms(17400), CPU: 1, Late: ms(12)}}, report.ProbesAtStalls{At: 1, Of: 3}},
		{"short stalls do not count", []Stall{{T: ms(17400), CPU: 1, Late: ms(6)}, {T: ms(19500), CPU: 0, Late: ms(7.9)}}, report.ProbesAtStalls{At: 0, Of: 3}},
		{"a stall just after a sample counts for it (slack)", []Stall{{T: ms(20150), CPU: 0, Late: ms(20)}}, report.ProbesAtStalls{At: 2, Of: 3}},
		{"a stall where only the other side probed explains none", []Stall{{T: ms(18500), CPU: 0, Late: ms(30)}}, report.ProbesAtStalls{At: 0, Of: 3}},
		{"probes before the first sample are not in Of", []Stall{{T: ms(15500), CPU: 0, Late: ms(30)}}, report.ProbesAtStalls{At: 0, Of: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &PhaseResult{TCPSeries: tcp, Stalls: tc.stalls, Host: withStalls(report.HostCPU{}, tc.stalls)}
			got := res.ProbesAtStalls(target)
			if got == nil || *got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	res := &PhaseResult{TCPSeries: tcp, Stalls: []Stall{{T: ms(18500), CPU: 0, Late: ms(30)}}}
	if got := res.ProbesAtStalls(target); got != nil {
		t.Errorf("unwatched phase: got %+v, want nil", got)
	}
	res.Host = withStalls(report.HostCPU{}, res.Stalls)
	if got := res.ProbesAtStalls(func(ns string) bool { return ns == "b3" }); got == nil || *got != (report.ProbesAtStalls{At: 5, Of: 5}) {
		t.Errorf("the other side: got %+v, want 5 of 5", got)
	}
	if got := res.ProbesAtStalls(func(ns string) bool { return ns == "b2" }); got != nil {
		t.Errorf("a side never sampled: got %+v, want nil", got)
	}
}

// TestRetransAtStalls: retransmitted segments, not probes, are matched
// to the stalls. The target's counters and the stalls are read-backup
// s1-r4-59bf5ef's 15 ms phase (threshold-15ms.r0/tcp.csv, stalls.csv):
// its two retransmissions, both DSACKed, came in the second of an 83 ms
// stall of CPU 0; the three probes at the step at 81 s sent new data
// and count for neither.
func TestRetransAtStalls(t *testing.T) {
	at := func(s float64, retrans, probes uint64) TCPSample {
		return TCPSample{T: time.Duration(s * float64(time.Second)), C: TCPCounters{RetransSegs: retrans, LossProbes: probes}}
	}
	tcp := map[string][]TCPSample{"bm": {
		at(80, 0, 0), at(81, 0, 3), at(82, 0, 3),
		at(160, 0, 11), at(161, 0, 11), at(162, 2, 13), at(163, 2, 13),
	}}
	target := func(ns string) bool { return ns == "bm" }
	for _, tc := range []stallCase{
		{"the recorded 83 ms stall", []Stall{{T: ms(161692), CPU: 0, Late: ms(82.94)}}, report.ProbesAtStalls{At: 2, Of: 2}},
		{"only the stall at the step (probes, no retransmission)", []Stall{{T: ms(80500), CPU: 1, Late: ms(20)}}, report.ProbesAtStalls{At: 0, Of: 2}},
		{"no stalls", []Stall{}, report.ProbesAtStalls{At: 0, Of: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &PhaseResult{TCPSeries: tcp, Stalls: tc.stalls, Host: withStalls(report.HostCPU{}, tc.stalls)}
			if got := res.RetransAtStalls(target); got == nil || *got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestTCPWatchEverySecond: the watch reads each command's namespace
// through /proc/PID/net (here this test's own, standing in for a fio
// host's) once per whole second however often it is asked, leaves out
// the seconds a process has gone, and writes every sample to tcp.csv.
func TestTCPWatchEverySecond(t *testing.T) {
	w := &tcpWatch{pids: map[string]int{"b3": os.Getpid()}, next: time.Second, series: map[string][]TCPSample{}}
	for at := 100 * time.Millisecond; at <= 3500*time.Millisecond; at += 100 * time.Millisecond {
		w.sample(at)
	}
	if s := w.series["b3"]; len(s) != 3 || s[0].T != time.Second || s[2].T != 3*time.Second {
		t.Fatalf("samples %+v, want three, at 1, 2, 3 s", s)
	}
	w.pids["b4"] = -1 // no such process: its seconds are left out
	w.sample(4 * time.Second)
	if _, ok := w.series["b4"]; ok || len(w.series["b3"]) != 4 {
		t.Fatalf("series %+v: want b3's fourth sample and nothing for b4", w.series)
	}
	path := filepath.Join(t.TempDir(), "tcp.csv")
	if err := w.writeCSV(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 5 || lines[0] != "t_s,ns,retrans_segs,loss_probes,dsack_recv,rto_timeouts,host_queue_skips,fast_retrans,rcv_drops" || !strings.HasPrefix(lines[1], "1.0,b3,") {
		t.Errorf("tcp.csv:\n%s", b)
	}
}

// TestTCPWatchFindsTheCommandsNamespaces: a started `ip netns exec NS
// fio …` command is watched under NS through its own pid.
func TestTCPWatchFindsTheCommandsNamespaces(t *testing.T) {
	c := exec.Command("true", "netns", "exec", "b4", "fio")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Wait()
	w := newTCPWatch([]*exec.Cmd{c, exec.Command("true")})
	if w.pids["b4"] != c.Process.Pid {
		t.Errorf("pids %v, want b4 → %d", w.pids, c.Process.Pid)
	}
}
