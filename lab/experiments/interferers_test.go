package experiments

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// fakeRunner is a Runner on the default lab's plan, with no lab behind it:
// enough to build phases and job files.
func fakeRunner(o Options) *runner {
	res := &lab.Resource{Name: "vg1"}
	for i, h := range lab.Hosts {
		res.LUNs = append(res.LUNs, lab.LUN{Host: h, Number: i + 1, URL: fmt.Sprintf("lun-%d", i+1)})
	}
	if o.Scale == 0 {
		o.Scale = 0.25
	}
	return wrap(lab.PlanRunner(&lab.State{Options: lab.DefaultOptions()}, res, o.RunOptions), o)
}

// Each controlled experiment's load: which hosts run what, in every
// on-period of the same schedule, the reader beside them throughout.
func TestControlledLoads(t *testing.T) {
	type host struct {
		host, name, rw string
		bs, mix, jobs  int
	}
	for _, tc := range []struct {
		kind  string
		load  *interferers
		hosts []host
	}{
		{"autonomic", writerLoad, []host{{"b3", "writer", "write", 64 << 10, 0, 4}, {"b4", "writer", "write", 64 << 10, 0, 4}, {"b5", "writer", "write", 64 << 10, 0, 4}}},
		{"read-backup", backupLoad, []host{{"b3", "backup", "read", 64 << 10, 0, 4}, {"b4", "backup", "read", 64 << 10, 0, 4}, {"b5", "backup", "read", 64 << 10, 0, 4}}},
		{"mixed", mixedLoad, []host{{"b3", "vm", "randrw", 8 << 10, 70, 4}, {"b4", "oltp", "randrw", 8 << 10, 50, 4}, {"b5", "checkpoint", "randrw", 64 << 10, 50, 2}}},
	} {
		if got := controlledExperiments[tc.kind].load; got != tc.load {
			t.Errorf("%s: runs another load", tc.kind)
		}
		for _, cycles := range []int{0, 2} {
			r := fakeRunner(Options{Cycles: cycles})
			s := report.ControlledSchedule(r.Scale, r.opts.Cycles)
			wantCycles := 6
			if cycles > 0 {
				wantCycles = cycles
			}
			// The thesis' times × 0.25: 20 s lead, 25 s on, 5 s off, 10 s tail.
			if s.Lead != 5*time.Second || s.On != 6250*time.Millisecond || s.Off != 1250*time.Millisecond || s.Tail != 2500*time.Millisecond || s.Cycles != wantCycles {
				t.Fatalf("schedule %+v", s)
			}
			p := r.controlledPhase(tc.load, s, "baseline", "agent off")
			if p.Length != s.Lead+time.Duration(wantCycles)*7500*time.Millisecond+s.Tail || p.From != s.Lead || p.To != p.Length-s.Tail {
				t.Errorf("%s: phase %v, window %v..%v", tc.kind, p.Length, p.From, p.To)
			}
			if rd := p.Jobs[0]; rd.Host != "b2" || rd.RW != "randread" || rd.BS != 8<<10 || rd.Rate != 256<<10 || rd.Runtime != p.Length {
				t.Errorf("%s: reader %+v", tc.kind, rd)
			}
			jobs := p.Jobs[1:]
			if len(jobs) != wantCycles*len(tc.hosts) {
				t.Fatalf("%s, %d cycles: %d interferer jobs", tc.kind, wantCycles, len(jobs))
			}
			for i, j := range jobs {
				c, w := i/len(tc.hosts), tc.hosts[i%len(tc.hosts)]
				if j.Host != w.host || j.Name != fmt.Sprintf("%s-%d", w.name, c) || j.RW != w.rw || j.BS != w.bs || j.RWMixRead != w.mix || j.NumJobs != w.jobs {
					t.Errorf("%s job %d: %s on %s, %s %d B mix %d x%d; want %s-%d on %s, %s %d B mix %d x%d", tc.kind, i,
						j.Name, j.Host, j.RW, j.BS, j.RWMixRead, j.NumJobs, w.name, c, w.host, w.rw, w.bs, w.mix, w.jobs)
				}
				if j.URL != r.LUN(w.host).URL || j.Rate != 0 || j.Start != s.Start(c) || j.Runtime != s.On {
					t.Errorf("%s job %d: %s, rate %d, on at %v for %v; want its own LUN, unlimited, at %v for %v", tc.kind, i, j.URL, j.Rate, j.Start, j.Runtime, s.Start(c), s.On)
				}
				// Each thread in its own region of the host's LUN.
				if j.Size <= 0 || j.Size%65536 != 0 || j.Size*int64(j.NumJobs) > lab.DefaultOptions().LUNSize {
					t.Errorf("%s job %d: region %d × %d threads", tc.kind, i, j.Size, j.NumJobs)
				}
				if err := j.Validate(); err != nil {
					t.Error(err)
				}
			}
			if steps := s.Steps(); len(steps) != wantCycles || steps[0] != 5 || steps[len(steps)-1] != (s.Lead+time.Duration(wantCycles-1)*7500*time.Millisecond).Seconds() {
				t.Errorf("steps %v", steps)
			}
		}
	}
}

// On a modelled group ten times slower than the default (the TCG guest's),
// 64 KiB requests shrink as the writers' do, so one request still holds
// the group about as long.
func TestInterferersBlockSizeFollowsTheGroup(t *testing.T) {
	r := fakeRunner(Options{})
	r.State.Options.Model.Bandwidth = 4e6
	for _, tc := range []struct {
		load *interferers
		bs   []int
	}{
		{writerLoad, []int{8 << 10, 8 << 10, 8 << 10}},
		{backupLoad, []int{8 << 10, 8 << 10, 8 << 10}},
		{mixedLoad, []int{4 << 10, 4 << 10, 8 << 10}},
	} {
		var got []int
		for _, j := range tc.load.jobs(r, 0, time.Second) {
			got = append(got, j.BS)
		}
		if !slices.Equal(got, tc.bs) {
			t.Errorf("%s: block sizes %v, want %v", tc.load.many, got, tc.bs)
		}
	}
}

// The oracle's static delay acts in the directions the interferers load:
// writers only by write delay (as before issue 30), readers and mixed
// I/O by both; delay.png follows the same rule.
func TestInterferersDelay(t *testing.T) {
	d := 7 * time.Millisecond
	for _, tc := range []struct {
		load *interferers
		set  throttle.Setting
		// what delay.png shows for a read-only and a write-only setting
		readOnly, writeOnly float64
	}{
		{writerLoad, throttle.Setting{WriteDelay: d}, 0, 3},
		{backupLoad, throttle.Setting{ReadDelay: d, WriteDelay: d}, 5, 3},
		{mixedLoad, throttle.Setting{ReadDelay: d, WriteDelay: d}, 5, 3},
	} {
		if got := tc.load.setting(d); got != tc.set {
			t.Errorf("%s: oracle sets %+v, want %+v", tc.load.many, got, tc.set)
		}
		if got := tc.load.delay(throttle.Setting{ReadDelay: 5 * time.Millisecond}); got != tc.readOnly {
			t.Errorf("%s: a 5 ms read delay plots as %v", tc.load.many, got)
		}
		if got := tc.load.delay(throttle.Setting{ReadDelay: 2 * time.Millisecond, WriteDelay: 3 * time.Millisecond}); got != tc.writeOnly {
			t.Errorf("%s: 2 ms read, 3 ms write plots as %v", tc.load.many, got)
		}
	}
	if got := interfererAddrs(); len(got) != 3 || got[0] != lab.HostAddr("b3") || got[2] != lab.HostAddr("b5") {
		t.Errorf("interferer hosts %v", got)
	}
}

// The interferers' rate and onset count their reads where they read; the
// writers' figures stay as they were.
func TestInterferersCountReads(t *testing.T) {
	iv := sample.Interval{Reads: 10, Writes: 0, ReadBps: 30e6, WriteBps: 5e6}
	if writerLoad.moved(iv) != 5 || backupLoad.moved(iv) != 35 || mixedLoad.moved(iv) != 35 {
		t.Errorf("moved: writers %v, backup %v, mixed %v", writerLoad.moved(iv), backupLoad.moved(iv), mixedLoad.moved(iv))
	}
	ticks := []lab.Tick{{T: 0.1, Dev: map[string]sample.Interval{"b2": {Reads: 3, Writes: 1}, "b3": {Reads: 4, Writes: 2}}}}
	got := report.ReadsAsWrites(ticks, "b2")
	if got[0].Dev["b2"].Writes != 1 || got[0].Dev["b3"].Writes != 6 || ticks[0].Dev["b3"].Writes != 2 {
		t.Errorf("ReadsAsWrites %+v (input now %+v)", got, ticks)
	}
}

// read-backup and mixed run like autonomic: --backends, scale 0.25, the
// thesis' thresholds, the default config, the oracle.
func TestInterferenceExperimentsRegistered(t *testing.T) {
	for _, name := range []string{"read-backup", "mixed"} {
		e, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		c := controlledExperiments[name]
		if !e.Takes(flagBackends) || e.DefaultScale != 0.25 || !c.autonomic || !c.oracle || c.bridge || !slices.Equal(c.thresholds, Thresholds) {
			t.Errorf("%s: %+v, %+v", name, e, c)
		}
		if c.load.name == "" || !c.load.reads {
			t.Errorf("%s: interferers %q, reads %v", name, c.load.name, c.load.reads)
		}
	}
	if a := controlledExperiments["autonomic"]; a.load != writerLoad || a.load.name != "" || a.load.reads || !slices.Equal(a.thresholds, AutonomicThresholds) {
		t.Errorf("autonomic changed: %+v", a)
	}
	if _, err := runControlled(fakeRunner(Options{Writers: 6}), "mixed"); err == nil {
		t.Error("mixed took --writers")
	}
}

// delay.png: writers' runs keep their one write-delay curve; runs against
// readers show the read delay, the write delay only if one was set, and
// the delay on the protected reader only if it had one.
func TestDelaySeries(t *testing.T) {
	ds := delaySamples{x: []float64{1, 1.5}, delay: []float64{0, 4}, read: []float64{0, 4}, write: []float64{0, 0}, reader: []float64{0, 0}}
	names := func(l *interferers) (n []string) {
		for _, s := range ds.series("threshold 15ms", l) {
			n = append(n, s.Name)
		}
		return n
	}
	if got := names(writerLoad); !slices.Equal(got, []string{"threshold 15ms"}) {
		t.Errorf("writers: %v", got)
	}
	if got := names(backupLoad); !slices.Equal(got, []string{"threshold 15ms, read delay"}) {
		t.Errorf("backup, no write delay: %v", got)
	}
	ds.write[1] = 2
	if got := names(mixedLoad); !slices.Equal(got, []string{"threshold 15ms, read delay", "threshold 15ms, write delay"}) {
		t.Errorf("mixed: %v", got)
	}
	ds.reader[1] = 4
	if got := names(mixedLoad); !slices.Equal(got, []string{"threshold 15ms, read delay", "threshold 15ms, write delay", "threshold 15ms, on the reader b2"}) {
		t.Errorf("mixed, reader delayed too: %v", got)
	}
	if got := names(writerLoad); !slices.Equal(got, []string{"threshold 15ms"}) {
		t.Errorf("writers, reader delayed too: %v (autonomic's plot stays as it was)", got)
	}
	run := ControlledRun{}
	ds.throttled(&run, &lab.Phase{From: 0, To: 2 * time.Second})
	if run.MaxDelay != 4 || run.Throttled != 50 {
		t.Errorf("max delay %v, throttled %v%%", run.MaxDelay, run.Throttled)
	}
}

// The oracle after login sets its delay a moment after each on-step and
// lifts it at each off-step, as the agent can; a probe (no off-step)
// keeps it.
func TestAfterLoginEvents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		starts []time.Duration
		on     time.Duration
		want   []time.Duration // delay set, in event order
		at     []time.Duration
	}{
		{"probe", []time.Duration{0}, 0, []time.Duration{7 * time.Millisecond}, []time.Duration{oracleAfterLogin}},
		{"cycles", []time.Duration{10 * time.Second, 25 * time.Second}, 12 * time.Second,
			[]time.Duration{7 * time.Millisecond, 0, 7 * time.Millisecond, 0},
			[]time.Duration{10*time.Second + oracleAfterLogin, 22 * time.Second, 25*time.Second + oracleAfterLogin, 37 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []time.Duration
			ev := afterLoginEvents(7*time.Millisecond, tc.starts, tc.on, func(d time.Duration) error { got = append(got, d); return nil })
			var at []time.Duration
			for _, e := range ev {
				at = append(at, e.At)
				if err := e.Do(); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(at, tc.at) || !slices.Equal(got, tc.want) {
				t.Errorf("events at %v set %v, want at %v set %v", at, got, tc.at, tc.want)
			}
		})
	}
}
