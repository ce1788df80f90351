package experiments

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/lab"
)

// --backends replaces whatever backend --agent-set names, and keeps the
// rest of the agent's YAML.
func TestWithBackend(t *testing.T) {
	for _, tc := range []struct{ yaml, backend, want string }{
		{"", "edt", "backend: edt"},
		{"backend: delayline+htb\nrate_lever_steps: 20", "netem", "rate_lever_steps: 20\nbackend: netem"},
		{"pid: {kp: 1}\n  backend: htb\n", "delayline", "pid: {kp: 1}\nbackend: delayline"},
	} {
		if got := withBackend(tc.yaml, tc.backend); got != tc.want {
			t.Errorf("withBackend(%q, %q) = %q, want %q", tc.yaml, tc.backend, got, tc.want)
		}
	}
}

// A --backends list is checked before anything runs: only delay
// backends, each once.
func TestCheckBackends(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		wantErr string
	}{
		{nil, ""},
		{[]string{"edt", "netem", "delayline"}, ""},
		{[]string{"htb"}, `"htb" is not a delay backend`},
		{[]string{"dry-run"}, `"dry-run" is not a delay backend`},
		{[]string{"edt", "EDT"}, `"EDT" is not a delay backend`},
		{[]string{"edt", "netem", "edt"}, `"edt" named twice`},
	} {
		err := checkBackends(tc.in)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("checkBackends(%q) = %v, want %q", tc.in, err, tc.wantErr)
		}
	}
}

// Bad --backends input is refused before the lab is touched: no root, no
// lab, no results directory are needed to get the error.
func TestRunExperimentRefusesBackendsItCannotRun(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		backends []string
		wantErr  string
	}{
		{"interference", []string{"edt"}, "interference takes no --backends"},
		{"equal-share", []string{"netem"}, "takes no --backends"},
		{"delay-sweep", []string{"htb"}, "not a delay backend"},
		{"throttle-effect", []string{"edt", "edt"}, "named twice"},
	} {
		_, err := RunExperiment(context.Background(), tc.name, Options{Backends: tc.backends, RunOptions: lab.RunOptions{Results: dir}})
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s --backends %v: %v, want %q", tc.name, tc.backends, err, tc.wantErr)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		t.Errorf("a refused run left %d entries in the results directory", len(ents))
	}
	for _, name := range []string{"delay-sweep", "delay-sweep-fresh", "throttle-effect", "overhead", "pid", "autonomic"} {
		if e, err := Lookup(name); err != nil || !e.Takes(flagBackends) {
			t.Errorf("%s should take --backends", name)
		}
	}
}

// fakeRun is a backend's summary for eachBackend's test.
type fakeRun struct {
	Backend string          `json:"backend"`
	CPU     float64         `json:"agent_cpu_pct"`
	Prefix  string          `json:"trace_prefix"`
	Dir     string          `json:"dir"`
	TCP     lab.TCPCounters `json:"tcp"`
}

func (f *fakeRun) tcpTotal() lab.TCPCounters { return f.TCP }
func (f *fakeRun) setAgent(backend string, cpuPct float64) {
	f.Backend, f.CPU = backend, cpuPct
}

// With --backends, each backend runs in its own subdirectory with its own
// summary.json, its trace rows tagged, its agent's CPU its own; the
// summary puts them side by side and the runner is left as it was.
func TestEachBackendSideBySide(t *testing.T) {
	dir := t.TempDir()
	r := &runner{Runner: &lab.Runner{Dir: dir}, opts: Options{Backends: []string{"edt", "netem"}}}
	cpu := map[string]lab.AgentUse{"edt": {CPU: 0.1, Wall: 100}, "netem": {CPU: 2, Wall: 100}}
	v, err := r.eachBackend("delay-sweep", func(be string) (backendRun, error) {
		r.use = r.use.Add(cpu[be])
		return &fakeRun{Prefix: r.TracePrefix, Dir: r.Dir, TCP: lab.TCPCounters{RetransSegs: uint64(len(be))}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sum := v.(BackendsSummary)
	if r.Dir != dir || r.TracePrefix != "" {
		t.Errorf("runner left at dir %q prefix %q", r.Dir, r.TracePrefix)
	}
	if len(sum.Runs) != 2 {
		t.Fatalf("runs %+v", sum.Runs)
	}
	for i, want := range []struct {
		be  string
		cpu float64
	}{{"edt", 0.1}, {"netem", 2}} {
		run := sum.Runs[i]
		f := run.Summary.(*fakeRun)
		if run.Backend != want.be || f.Backend != want.be || f.Prefix != want.be+"/" || f.Dir != filepath.Join(dir, want.be) {
			t.Errorf("run %d: %+v / %+v", i, run, f)
		}
		if run.AgentCPUPct != want.cpu || f.CPU != want.cpu {
			t.Errorf("%s: agent CPU %v / %v, want %v", want.be, run.AgentCPUPct, f.CPU, want.cpu)
		}
		if run.Retrans != uint64(len(want.be)) {
			t.Errorf("%s: retransmits %d", want.be, run.Retrans)
		}
		b, err := os.ReadFile(filepath.Join(dir, want.be, "summary.json"))
		if err != nil || !strings.Contains(string(b), `"backend": "`+want.be+`"`) {
			t.Errorf("%s/summary.json: %v %s", want.be, err, b)
		}
	}
}

// Without --backends the experiment runs once, on the delay line, and its
// summary is the experiment's own.
func TestEachBackendDefaultIsDelayLine(t *testing.T) {
	r := &runner{Runner: &lab.Runner{Dir: t.TempDir()}}
	v, err := r.eachBackend("throttle-effect", func(be string) (backendRun, error) {
		return &fakeRun{Prefix: r.TracePrefix}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if f := v.(*fakeRun); f.Backend != "delayline" || f.Prefix != "" {
		t.Errorf("%+v", f)
	}
}
