package cluster

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The pure half of a Node (step.go), without etcd: these are the rules
// the simulator's cluster-scale scenario runs at 100 agents, so they are
// pinned here on their own.

var testTiming = Timing{Fresh: testFresh, Decay: testDecay, Blend: testBlend}

func TestFollowerReceive(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name      string
		have      *Shared // taken before, live at t0
		rec       Shared
		live      bool
		taken     bool
		freshAtT1 bool // at t0+100ms
	}{
		{"first record, live", nil, Shared{Seq: 1, Leader: "a", Step: 3}, true, true, true},
		{"first record, read: remembered, not fresh", nil, Shared{Seq: 1, Leader: "a", Step: 3}, false, true, false},
		{"same leader, newer", &Shared{Seq: 4, Leader: "a"}, Shared{Seq: 5, Leader: "a"}, true, true, true},
		{"same leader, replay", &Shared{Seq: 4, Leader: "a"}, Shared{Seq: 4, Leader: "a"}, true, false, true},
		{"same leader, older", &Shared{Seq: 4, Leader: "a"}, Shared{Seq: 2, Leader: "a"}, true, false, true},
		{"new leader, lower sequence", &Shared{Seq: 4, Leader: "a"}, Shared{Seq: 1, Leader: "b"}, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f Follower
			if tc.have != nil {
				f.Receive(*tc.have, true, t0)
			}
			t1 := t0.Add(100 * time.Millisecond)
			if got := f.Receive(tc.rec, tc.live, t1); got != tc.taken {
				t.Fatalf("taken %v, want %v", got, tc.taken)
			}
			if tc.taken && (f.Shared.Seq != tc.rec.Seq || f.Shared.Leader != tc.rec.Leader || f.Shared.Step != tc.rec.Step) {
				t.Errorf("holds %+v, want %+v", f.Shared, tc.rec)
			}
			if got := f.Fresh(testTiming, t1); got != tc.freshAtT1 {
				t.Errorf("fresh %v, want %v", got, tc.freshAtT1)
			}
		})
	}
}

// TestFollowerZeroValue: a zero Follower is an agent in local control.
func TestFollowerZeroValue(t *testing.T) {
	var f Follower
	if s, m := f.Step(testTiming, 7, time.Unix(1, 0)); s != 7 || m != ModeLocal {
		t.Fatalf("%d %s, want 7 local", s, m)
	}
}

func TestLeaderStep(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// Every agent at the threshold: the PID holds its preset output, so a
	// record's step is where the controller started.
	atThreshold := map[string]Indicator{
		"a": {WaitMs: threshold, ReadBps: 3e6, LocalStep: 10},
		"b": {WaitMs: threshold, ReadBps: 1e6, LocalStep: 30},
	}
	for _, tc := range []struct {
		name string
		prev *Shared         // the previous leader's record, received live at t0
		age  time.Duration   // time from t0 to the first tick
		want int             // the first record's step
		seq  uint64          // and its sequence number
		pre  func(l *Leader) // before the first tick
	}{
		{"no shared step: the read-weighted local steps, rounded up", nil, 0, 15, 1, nil},
		{"previous leader's step, still within Decay", &Shared{Seq: 41, Leader: "x", Step: 22}, testDecay, 22, 42, nil},
		{"previous leader's step past Decay: local steps", &Shared{Seq: 41, Leader: "x", Step: 22}, testDecay + time.Millisecond, 15, 42, nil},
		{"renewed: this leader's own last step; the sequence passes the highest seen", &Shared{Seq: 41, Leader: "x", Step: 22}, 0, 33, 42, func(l *Leader) {
			l.seq, l.lastStep = 7, 33
			l.Drop()
			ctrl, _ := testPID("")
			l.Renewed(ctrl)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f Follower
			if tc.prev != nil {
				f.Receive(*tc.prev, true, t0)
			}
			var l Leader
			ctrl, _ := testPID("")
			l.Elected(ctrl)
			if tc.pre != nil {
				tc.pre(&l)
			}
			now := t0.Add(tc.age)
			got := l.Step("a", atThreshold["a"], atThreshold, &f, testTiming, control1ms, now)
			if !got.Preset || got.From != tc.want || got.Rec == nil || got.Rec.Step != tc.want || got.Rec.Seq != tc.seq {
				t.Fatalf("first tick: %+v rec %+v; want preset from %d, record step %d seq %d", got, got.Rec, tc.want, tc.want, tc.seq)
			}
			if got.Rec.Leader != "a" || got.Rec.Agents != 2 || got.Rec.WaitMs == nil || *got.Rec.WaitMs != threshold {
				t.Errorf("record %+v", got.Rec)
			}
		})
	}
}

// TestLeaderRepublish: a steady step is republished at least three times
// per Fresh (here every other 100 ms tick), a changed one at once, and the
// sequence grows by one per record.
func TestLeaderRepublish(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var f Follower
	var l Leader
	ctrl, _ := testPID("")
	l.Elected(ctrl)
	agents := map[string]Indicator{"a": {WaitMs: threshold, ReadBps: 1e6}}
	var at []time.Duration
	var seqs []uint64
	for i := range 10 {
		d := time.Duration(i) * 100 * time.Millisecond
		if r := l.Step("a", agents["a"], agents, &f, testTiming, control1ms, t0.Add(d)); r.Rec != nil {
			at, seqs = append(at, d), append(seqs, r.Rec.Seq)
		}
	}
	want := []time.Duration{0, 200 * time.Millisecond, 400 * time.Millisecond, 600 * time.Millisecond, 800 * time.Millisecond}
	if len(at) != len(want) {
		t.Fatalf("records at %v, want %v", at, want)
	}
	for i := range want {
		if at[i] != want[i] || seqs[i] != uint64(i+1) {
			t.Fatalf("records at %v seq %v, want %v seq 1..", at, seqs, want)
		}
	}
	// The load rises: the step changes, so the next tick publishes.
	agents["a"] = Indicator{WaitMs: 3 * threshold, ReadBps: 1e6}
	if r := l.Step("a", agents["a"], agents, &f, testTiming, control1ms, t0.Add(time.Second)); r.Rec == nil || r.Rec.Step == 0 {
		t.Fatalf("a changed step was not published at once: %+v", r)
	}
}

const control1ms = time.Millisecond

func TestIndicatorCodec(t *testing.T) {
	at := time.Unix(1000, 0).UTC()
	for _, ind := range []Indicator{
		{WaitMs: 12.5, ReadBps: 1e6, LocalStep: 3},
		{WaitMs: math.NaN(), WriteBps: 5e6},
		{WaitMs: math.Inf(1)},
	} {
		b, err := EncodeIndicator(ind, at)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeIndicator(b)
		if err != nil {
			t.Fatal(err)
		}
		if math.IsNaN(ind.WaitMs) || math.IsInf(ind.WaitMs, 0) {
			if !strings.Contains(string(b), `"wait_ms":null`) || !math.IsNaN(got.WaitMs) {
				t.Errorf("%v travels as %s, read back %v; want null and NaN", ind.WaitMs, b, got.WaitMs)
			}
			continue
		}
		if got.WaitMs != ind.WaitMs || got.ReadBps != ind.ReadBps || got.LocalStep != ind.LocalStep {
			t.Errorf("round trip %+v → %s → %+v", ind, b, got)
		}
	}
	if _, err := DecodeShared([]byte("{")); err == nil {
		t.Error("a malformed record decoded")
	}
}

// TestBalance: the leader (line[0]) leads 5 of 9 resources with a fair
// share of 3, so its excess is 2; it hands over to the next in line only
// if that one's excess is at most 0, and otherwise asks it to step back
// only if a live agent that light stands further back.
func TestBalance(t *testing.T) {
	load := func(leads int) Indicator { return Indicator{Leads: leads, Share: 3} }
	for _, tc := range []struct {
		name   string
		line   []Candidate
		agents map[string]Indicator // live ones
		handTo string
		yield  Candidate
	}{
		{"alone", []Candidate{{"l", 1}}, nil, "", Candidate{}},
		{"next light: hand over", []Candidate{{"l", 1}, {"a", 2}, {"b", 3}},
			map[string]Indicator{"a": load(2), "b": load(0)}, "a", Candidate{}},
		{"next heavy, a light one behind: next steps back", []Candidate{{"l", 1}, {"a", 2}, {"b", 3}},
			map[string]Indicator{"a": load(4), "b": load(0)}, "", Candidate{"a", 2}},
		{"next heavy, nobody light: nothing", []Candidate{{"l", 1}, {"a", 2}, {"b", 3}},
			map[string]Indicator{"a": load(4), "b": load(4)}, "", Candidate{}},
		{"the light one behind is not live: nothing", []Candidate{{"l", 1}, {"a", 2}, {"b", 3}},
			map[string]Indicator{"a": load(4)}, "", Candidate{}},
		{"next not live, a light one behind: next steps back", []Candidate{{"l", 1}, {"a", 2}, {"b", 3}},
			map[string]Indicator{"b": load(1)}, "", Candidate{"a", 2}},
		{"an agent that does not balance (no share) is never light", []Candidate{{"l", 1}, {"a", 2}, {"b", 3}},
			map[string]Indicator{"a": load(4), "b": {Leads: 0}}, "", Candidate{}},
	} {
		live := func(id string) (Indicator, bool) { ind, ok := tc.agents[id]; return ind, ok }
		to, y := Balance(5, 3, tc.line, live)
		if to != tc.handTo || y != tc.yield {
			t.Errorf("%s: Balance = %q, %+v; want %q, %+v", tc.name, to, y, tc.handTo, tc.yield)
		}
	}
}
