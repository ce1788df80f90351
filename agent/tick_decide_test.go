package agent

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/throttle"
)

// decidedAt runs the recorded fixture through sample and measure until
// the given second, then the decide stage at steps, with the status the
// loop would have built (the backup's wait, 27 ms, above 15 ms).
func decidedAt(t *testing.T, fixture string, until float64, steps int) (*Loops, *resourceState, ResourceStatus, PolicyOutput) {
	t.Helper()
	rs, _ := measuredAt(t, fixture, until)
	l, _ := stageState(t)
	st := ResourceStatus{Name: "vg1", Consumers: make([]ConsumerStatus, len(rs.in.Consumers)), IndicatorMs: 27, ThresholdMs: 15}
	for k, c := range rs.in.Consumers {
		st.Consumers[k].Addr = c.Addr.String()
	}
	return l, rs, st, l.decide(rs, &st, steps)
}

// interferer is what each host but the reader (b2) should get.
func interferer(h string, s throttle.Setting) throttle.Setting {
	if h == "b2" {
		return throttle.Setting{}
	}
	return s
}

// decide: the measured recorded inputs at a controller step give each
// interferer the direction it loads the resource in (reads for the
// backup, writes for the writers, both once pinned at max_delay), put the
// interferers and never the reader in the throttleable set, and say AT
// MAX only when pinned above the threshold.
func TestStageDecide(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fixture string
		until   float64
		steps   int
		want    throttle.Setting // each interferer's
	}{
		{"backup at 10 ms: reads", "testdata/stages/read-backup-baseline.csv", 7.0, 20, throttle.Setting{ReadDelay: 10 * time.Millisecond}},
		{"writers at 10 ms: writes", "testdata/stages/writers-baseline.csv", 7.4, 20, throttle.Setting{WriteDelay: 10 * time.Millisecond}},
		{"backup pinned at 40 ms: both ways", "testdata/stages/read-backup-baseline.csv", 7.0, 80,
			throttle.Setting{ReadDelay: 40 * time.Millisecond, WriteDelay: 40 * time.Millisecond}},
		{"writers beyond max_delay: capped at 40 ms, both ways", "testdata/stages/writers-baseline.csv", 7.4, 120,
			throttle.Setting{ReadDelay: 40 * time.Millisecond, WriteDelay: 40 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rs, st, out := decidedAt(t, tc.fixture, tc.until, tc.steps)
			if pinned := tc.steps >= 80; st.AtMaxDelay != pinned {
				t.Errorf("at max delay %v at %d steps", st.AtMaxDelay, tc.steps)
			}
			if want := min(time.Duration(tc.steps)*500*time.Microsecond, 40*time.Millisecond); st.Step != tc.steps || st.Delay != want || st.Policy != "read-over-write" {
				t.Errorf("status step %d delay %v policy %q, want %d, %v, read-over-write", st.Step, st.Delay, st.Policy, tc.steps, want)
			}
			if len(st.Throttleable) != 3 {
				t.Errorf("throttleable %v, want the three interferers", st.Throttleable)
			}
			for _, h := range stageHosts {
				a := stageAddr[h]
				if got, want := byAddr(&rs.in, out)[a], interferer(h, tc.want); got != want {
					t.Errorf("%s: decided %+v, want %+v", h, got, want)
				}
				if rs.slowed[a] != (h != "b2") {
					t.Errorf("%s: in the throttleable set %v", h, rs.slowed[a])
				}
			}
		})
	}
}

// shape: the settings become the resource's wishes (rs.asked); under a
// rise limit each
// tick's ask grows at most to 2 × the last + the limit, written back into
// the policy's output so the status shows what was asked. Read delays
// are always under one (readRiseStep, or delay_rise when set); write
// delays only with delay_rise.
func TestStageShape(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fixture string
		until   float64
		rise    time.Duration
		want    []throttle.Setting // each interferer's ask, tick by tick, at 20 steps
	}{
		{"writers: write delays", "testdata/stages/writers-baseline.csv", 7.4, 0,
			[]throttle.Setting{{WriteDelay: 10 * time.Millisecond}, {WriteDelay: 10 * time.Millisecond}}},
		{"backup: read delays rise 1, 3, 7, 10 ms without delay_rise", "testdata/stages/read-backup-baseline.csv", 7.0, 0,
			[]throttle.Setting{{ReadDelay: time.Millisecond}, {ReadDelay: 3 * time.Millisecond}, {ReadDelay: 7 * time.Millisecond}, {ReadDelay: 10 * time.Millisecond}}},
		{"backup under delay_rise 2 ms: 2, 6, 10 ms", "testdata/stages/read-backup-baseline.csv", 7.0, 2 * time.Millisecond,
			[]throttle.Setting{{ReadDelay: 2 * time.Millisecond}, {ReadDelay: 6 * time.Millisecond}, {ReadDelay: 10 * time.Millisecond}}},
		// A mixed consumer's data is held for the larger of its delays,
		// so its write delay climbs with the read's (mixed s1-r1-7bb651b).
		{"mixed: both directions rise 1, 3, 7, 10 ms together", "testdata/stages/mixed-baseline.csv", 22.0, 0,
			[]throttle.Setting{{WriteDelay: time.Millisecond, ReadDelay: time.Millisecond}, {WriteDelay: 3 * time.Millisecond, ReadDelay: 3 * time.Millisecond},
				{WriteDelay: 7 * time.Millisecond, ReadDelay: 7 * time.Millisecond}, {WriteDelay: 10 * time.Millisecond, ReadDelay: 10 * time.Millisecond}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, rs, st, _ := decidedAt(t, tc.fixture, tc.until, 20)
			l.cfg.RiseStep = tc.rise
			for tick, want := range tc.want {
				out := l.decide(rs, &st, 20)
				l.shape(rs, &out)
				for _, h := range stageHosts {
					a := stageAddr[h]
					w := interferer(h, want)
					got, ok := rs.asked[a]
					if set := byAddr(&rs.in, out); got != w || set[a] != w || ok == w.IsZero() {
						t.Errorf("tick %d, %s: shaped %+v (policy's output %+v), want %+v", tick, h, got, set[a], w)
					}
				}
				// The policy asks the last tick's settings from the first:
				// any other is the limit's.
				if want := tc.want[tick] != tc.want[len(tc.want)-1]; rs.limited != want {
					t.Errorf("tick %d: limited %v, want %v", tick, rs.limited, want)
				}
			}
		})
	}
}

// publish: each consumer the policy gave a non-zero setting is marked
// throttled with it on its status row, the others not, and the status is
// what Status serves.
func TestStagePublish(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings map[string]throttle.Setting
	}{
		{"nobody", nil},
		{"the backup, reads", map[string]throttle.Setting{"b3": {ReadDelay: 10 * time.Millisecond}, "b4": {ReadDelay: 10 * time.Millisecond}, "b5": {ReadDelay: 10 * time.Millisecond}}},
		{"a zero setting is not a throttle", map[string]throttle.Setting{"b3": {WriteDelay: 5 * time.Millisecond}, "b4": {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, rs, st, _ := decidedAt(t, "testdata/stages/read-backup-baseline.csv", 7.0, 0)
			set := map[netip.Addr]throttle.Setting{}
			for h, s := range tc.settings {
				set[stageAddr[h]] = s
			}
			rs.set = bySlot(&rs.in, set)
			l.publish(rs, "vg1", &st)
			pub := l.Status()
			if len(pub) != 1 || pub[0].Name != "vg1" {
				t.Fatalf("published %+v, want vg1's status", pub)
			}
			for _, h := range stageHosts {
				a := stageAddr[h].String()
				row := pub[0].Consumers[slices.IndexFunc(pub[0].Consumers, func(c ConsumerStatus) bool { return c.Addr == a })]
				want := tc.settings[h]
				if row.Throttled != !want.IsZero() || row.Setting != want {
					t.Errorf("%s: row throttled %v with %+v, want %v with %+v", h, row.Throttled, row.Setting, !want.IsZero(), want)
				}
			}
		})
	}
}
