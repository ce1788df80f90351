package experiments

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/lab"
)

// gunzipFixture decompresses dir's *.gz files into a temporary directory.
func gunzipFixture(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	paths, _ := filepath.Glob(filepath.Join(dir, "*.gz"))
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		w, err := os.Create(filepath.Join(out, strings.TrimSuffix(filepath.Base(p), ".gz")))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(w, zr); err != nil {
			t.Fatal(err)
		}
		w.Close()
		f.Close()
	}
	return out
}

// phasesBetween is one phase per name, each measured from from to to.
func phasesBetween(from, to time.Duration, names ...string) []*lab.Phase {
	var phases []*lab.Phase
	for _, n := range names {
		phases = append(phases, &lab.Phase{Name: n, From: from, To: to})
	}
	return phases
}

// recordedPolicyRun decompresses fixture's files and loads its trace
// over phases, which it must hold all of, and the agent's status polls.
func recordedPolicyRun(t *testing.T, fixture string, phases []*lab.Phase) (dir string, rs []*lab.PhaseResult, polls map[string][]StatusSample) {
	t.Helper()
	dir = gunzipFixture(t, fixture)
	rs, err := lab.LoadTrace(filepath.Join(dir, "trace.csv"), phases)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(phases) {
		t.Fatalf("%d phase results, want %d", len(rs), len(phases))
	}
	polls, err = LoadStatusLog(filepath.Join(dir, "status.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, rs, polls
}

// recordedSummary reads the summary.json fixture's run wrote into v.
func recordedSummary(t *testing.T, fixture string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixture, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// The fixture is a real slo-classes run at scale 1 in this lab (its
// regulated and burst phases: trace.csv, the agent's status polls, fio's
// clat logs, and the summary.json the run wrote). The expected figures
// come from an independent computation over the same files
// (testdata/slo-classes-run/oracle.py, standard-library Python).
func TestSLOClassesSummaryFromRecordedRun(t *testing.T) {
	main := &lab.Phase{Name: "slo-classes", From: 10 * time.Second, To: 59 * time.Second}
	burst := &lab.Phase{Name: "burst", From: 25 * time.Second, To: 45 * time.Second}
	dir, rs, polls := recordedPolicyRun(t, "testdata/slo-classes-run", []*lab.Phase{main, burst})
	run := SummarizeSLORun("slo-classes", "slo-classes", rs[0], polls["slo-classes"], dir)

	want := []struct {
		name                                     string
		iops, mbs, lat, p50, p95, fioP50, fioP95 float64
		tputDev, latDev, jitter                  float64
		agentIOPS, agentLatDev, agentJitter      float64
		met                                      bool
	}{
		{"power", 25.0, 1.6003, 9.2327, 8.667, 12.95, 11.1044, 68.9536, 0.0216, -0.7673, 2.7862, 25.0109, -0.7672, 2.2792, true},
		{"knowledge", 15.0, 0.9598, 12.0054, 12.0, 23.0, 13.1738, 24.4082, -0.0223, -2.9946, 11.1319, 15.0270, -2.9856, 5.6848, true},
		{"task", 5.0, 0.3203, 9.7918, 8.0, 16.0, 9.8266, 19.1432, 0.0937, 3.3918, 2.8238, 4.9855, 3.3962, 2.9273, false},
	}
	near := func(got, want, tol float64) bool { return math.Abs(got-want) <= tol }
	for i, w := range want {
		c := run.Classes[i]
		if c.Name != w.name || c.Agent == nil {
			t.Fatalf("class %d: %s (agent %v), want %s with agent figures", i, c.Name, c.Agent, w.name)
		}
		for _, f := range []struct {
			what      string
			got, want float64
			tol       float64 // the summary rounds to 3 (2 for %) decimals
		}{
			{"iops", float64(c.IOPS), w.iops, 0.001}, {"mb_s", float64(c.MBs), w.mbs, 0.001},
			{"mean latency", float64(c.MeanLatencyMs), w.lat, 0.001},
			{"p50", float64(c.LatencyP50Ms), w.p50, 0.001}, {"p95", float64(c.LatencyP95Ms), w.p95, 0.001},
			{"fio p50", float64(c.FioClatP50Ms), w.fioP50, 0.001}, {"fio p95", float64(c.FioClatP95Ms), w.fioP95, 0.001},
			{"throughput deviation", float64(c.ThroughputDeviationPct), w.tputDev, 0.006},
			{"latency deviation", float64(c.LatencyDeviationMs), w.latDev, 0.001},
			{"jitter", float64(c.JitterMs), w.jitter, 0.001},
			{"agent iops", float64(c.Agent.IOPS), w.agentIOPS, 0.001},
			{"agent latency deviation", float64(c.Agent.LatencyDeviationMs), w.agentLatDev, 0.001},
			{"agent jitter", float64(c.Agent.JitterLifeMs), w.agentJitter, 0.001},
		} {
			if !near(f.got, f.want, f.tol) {
				t.Errorf("%s %s: %v, want %v", w.name, f.what, f.got, f.want)
			}
		}
		if c.Met != w.met {
			t.Errorf("%s met %v, want %v", w.name, c.Met, w.met)
		}
		// The agent's window means and the trace's agree: one source
		// (the LUN's diskstats), two samplers.
		if !near(float64(c.Agent.MeanLatencyMs), float64(c.MeanLatencyMs), 0.05) || !near(float64(c.Agent.IOPS), float64(c.IOPS), 0.2) {
			t.Errorf("%s: agent %.3f ms %.3f IOPS vs trace %.3f ms %.3f IOPS", w.name, c.Agent.MeanLatencyMs, c.Agent.IOPS, c.MeanLatencyMs, c.IOPS)
		}
	}

	// Recomputed from the files, the summary is the one the run wrote
	// (its bulk writer rate and burst figures included).
	var recorded SLOClassesSummary
	recordedSummary(t, "testdata/slo-classes-run", &recorded)
	run.TCP = recorded.Runs[1].TCP // not in the trace
	sameJSON(t, "regulated run", run, recorded.Runs[1])
	var cl LabSLOClass
	for _, c := range SLOLabClasses {
		if c.Name == burstClass {
			cl = c
		}
	}
	bf := SummarizeBurst(cl, 1, rs[1], polls["burst"], burst.From, burst.To)
	sameJSON(t, "burst", bf, recorded.Burst)
	// The burst allowance: full credit when the burst began, spent in
	// about credit / (ratio − 1) seconds, then the class was slowed.
	if bf.CreditAtBurstS != 10 || !near(float64(bf.AllowanceS), float64(bf.ExpectedAllowanceS), 1) || bf.DelayWithCreditMs != 0 || !(bf.DelayAfterCreditMs > 0) {
		t.Errorf("burst allowance not shown: %+v", bf)
	}
}

// sameJSON compares got and want as JSON documents, numbers within 0.03:
// the trace stores MB/s to 3 decimals, which moves a recomputed %
// deviation by a few hundredths from the live run's.
func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	var g, w any
	for _, x := range []struct {
		v   any
		out *any
	}{{got, &g}, {want, &w}} {
		b, err := json.Marshal(x.v)
		if err != nil {
			t.Fatal(err)
		}
		json.Unmarshal(b, x.out)
	}
	var walk func(path string, a, b any)
	walk = func(path string, a, b any) {
		switch a := a.(type) {
		case map[string]any:
			bm, ok := b.(map[string]any)
			if !ok || len(a) != len(bm) {
				t.Errorf("%s%s: %v, recorded %v", what, path, a, b)
				return
			}
			for k := range a {
				walk(path+"."+k, a[k], bm[k])
			}
		case []any:
			bs, ok := b.([]any)
			if !ok || len(a) != len(bs) {
				t.Errorf("%s%s: %v, recorded %v", what, path, a, b)
				return
			}
			for i := range a {
				walk(fmt.Sprintf("%s[%d]", path, i), a[i], bs[i])
			}
		case float64:
			if bf, ok := b.(float64); !ok || math.Abs(a-bf) > 0.03 {
				t.Errorf("%s%s: recomputed %v, recorded %v", what, path, a, b)
			}
		default:
			if a != b {
				t.Errorf("%s%s: recomputed %v, recorded %v", what, path, a, b)
			}
		}
	}
	walk("", g, w)
}

// The fixture is a real weighted run at scale 1 in this lab (trace.csv,
// the agent's status polls, the summary.json it wrote). The expected
// writer shares come from testdata/weighted-run/oracle.py.
func TestWeightedSummaryFromRecordedRun(t *testing.T) {
	_, rs, polls := recordedPolicyRun(t, "testdata/weighted-run",
		phasesBetween(10*time.Second, 59*time.Second, "agent-off", "weighted-20ms", "weighted-50ms"))
	var recorded WeightedSummary
	recordedSummary(t, "testdata/weighted-run", &recorded)
	want := weightedOracle
	for i, res := range rs {
		maxDelay := []time.Duration{0, 20 * time.Millisecond, 50 * time.Millisecond}[i]
		policy := map[bool]string{true: "none", false: "weighted"}[maxDelay == 0]
		run := SummarizeWeightedRun(res.Phase.Name, policy, maxDelay, res, polls[res.Phase.Name])
		for k, s := range run.Shares[1:] {
			if math.Abs(s.WriterShare-want[i][k]) > 0.0006 {
				t.Errorf("%s %s: writer share %v, want %v", run.Name, s.Host, s.WriterShare, want[i][k])
			}
		}
		run.TCP = recorded.Runs[i].TCP
		// The run was recorded before distributions had a p99; the rest
		// of the distribution must still match.
		run.ReadWaitMs.P99 = recorded.Runs[i].ReadWaitMs.P99
		sameJSON(t, run.Name, run, recorded.Runs[i])
	}
}

// weightedOracle is oracle.py's output: b3, b4, b5's share of the
// writers' bytes per run (agent off, max_delay 20 ms, 50 ms).
var weightedOracle = [3][3]float64{{0.333, 0.3334, 0.3336}, {0.4747, 0.3156, 0.2097}, {0.5229, 0.2976, 0.1795}}

// The fixture is a real important-sets run at scale 1 in this lab; the
// expected figures come from testdata/important-sets-run/oracle.py.
func TestImportantSetsSummaryFromRecordedRun(t *testing.T) {
	names := []string{"agent-off", "read-over-write", "important-sets"}
	_, rs, polls := recordedPolicyRun(t, "testdata/important-sets-run", phasesBetween(10*time.Second, 59*time.Second, names...))
	want := []struct {
		mean, p50, p95, writeMBs float64
		meanMet                  bool
	}{
		{40.236, 42.834, 49.0, 12.898, false},
		{13.865, 14.0, 22.867, 6.724, true}, // held below the threshold: over-throttled
		{15.892, 16.225, 26.0, 9.392, true},
	}
	for i, res := range rs {
		policy := []string{"none", "read-over-write", "important-sets"}[i]
		run := SummarizeImportantRun(names[i], policy, 15, res, polls[names[i]])
		w := want[i]
		d := run.ImportantWaitMs
		if math.Abs(d.Mean-w.mean) > 0.006 || math.Abs(d.P50-w.p50) > 0.006 || math.Abs(d.P95-w.p95) > 0.006 ||
			math.Abs(run.WriteMBs-w.writeMBs) > 0.006 || run.MeanMet != w.meanMet || run.ThresholdMet {
			t.Errorf("%s: got %+v writes %v mean met %v p95 met %v, want %+v", names[i], d, run.WriteMBs, run.MeanMet, run.ThresholdMet, w)
		}
	}
}

// LoadStatusLog reads status.jsonl back, by phase.
func LoadStatusLog(path string) (map[string][]StatusSample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]StatusSample{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		var s StatusSample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		out[s.Phase] = append(out[s.Phase], s)
	}
	return out, sc.Err()
}
