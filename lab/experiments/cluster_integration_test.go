package experiments

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/sanqos/sanqos/lab"
)

// Issue 22's lab: three target hosts in front of one modelled resource
// and etcd, then a short cluster-autonomic run. What is asserted is what
// does not depend on timing luck: only bm's agent sees the reader, so
// local-only control never slows the writers behind bm2 and bm3, while
// cluster control slows the writers behind every target host; every
// policy change reaches all three agents; after the leader's kill another
// agent leads; after etcd's kill every agent is back on its own
// controller within Fresh + Decay (plus sampling slack), rejoins when etcd
// is back, and fio's verified writers read back every byte. The reader's
// p95 against the threshold is the experiment's summary, not a test.
func TestClusterLabThreeTargets(t *testing.T) {
	testenv.RequireCommands(t, "etcd")
	buildSanqos(t)
	o := lab.DefaultOptions()
	o.LUNSize, o.Targets = 256<<20, 3
	s := upLabWith(t, o)
	if !lab.EtcdRunning() || !s.TgtsReady() {
		t.Fatalf("etcd running %t, every tgtd ready %t", lab.EtcdRunning(), s.TgtsReady())
	}
	for _, l := range s.Resources[0].LUNs {
		if want := o.TargetOf(l.Host).Addr.String(); !strings.Contains(l.URL, want) {
			t.Errorf("%s's LUN %s is not served through %s", l.Host, l.URL, want)
		}
	}
	dir, err := RunExperiment(context.Background(), "cluster-autonomic", Options{RunOptions: lab.RunOptions{Scale: 0.1, Results: t.TempDir(), Repeat: 1}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum ClusterSummary
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	t.Logf("reader p95 x threshold: baseline %.2f, local %.2f, cluster %.2f; policy %v ms; faults %+v",
		sum.Baseline.P95X, sum.Local.P95X, sum.Cluster.P95X, sum.PolicyChanges, sum.Faults.ReleasedS)
	for _, ns := range []string{"bm2", "bm3"} {
		if d := sum.Local.MaxDelayMsByTarget[ns]; d != 0 {
			t.Errorf("local-only: %s throttled (%.1f ms) without seeing a read", ns, d)
		}
	}
	for _, ns := range sum.Targets {
		if d := sum.Cluster.MaxDelayMsByTarget[ns]; d <= 0 {
			t.Errorf("cluster: the writers behind %s were never slowed", ns)
		}
	}
	if len(sum.PolicyChanges) != 10 || sum.PolicyPropagationMs.Max > 1000 {
		t.Errorf("policy propagation: %v ms", sum.PolicyChanges)
	}
	f := sum.Faults
	if f.Leader == "" || f.NewLeaderS <= 0 {
		t.Errorf("leader %q killed, new leader after %.2f s", f.Leader, f.NewLeaderS)
	}
	if len(f.ReleasedS) != 3 {
		t.Errorf("released: %v", f.ReleasedS)
	}
	for ns, r := range f.ReleasedS {
		if r < 0 || r > f.BoundS+0.5 {
			t.Errorf("%s back on its own controller %.2f s after etcd died (bound %.1f s)", ns, r, f.BoundS)
		}
	}
	for ns, r := range f.FellBackS {
		if r < 0 || r > 1 {
			t.Errorf("%s fell back %.2f s after etcd died (want ≤ 1 s)", ns, r)
		}
	}
	if f.RejoinedS <= 0 {
		t.Error("no shared step after etcd came back")
	}
	if f.IOErrors != 0 {
		t.Errorf("fio verify: %s", f.FioError)
	}
	if _, err := os.Stat(filepath.Join(dir, "faults-timeline.csv")); err != nil {
		t.Error(err)
	}
}
