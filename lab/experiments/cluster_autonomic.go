package experiments

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// clusterAutonomic: Three target hosts, local vs cluster control, faults.
func init() {
	register(&Experiment{Name: "cluster-autonomic", DefaultScale: 0.5, Flags: []*Flag{flagThresholds, flagAgentSet, flagLUNMap},
		Title: "Three target hosts in front of one resource, writers on all: local-only control vs cluster control on etcd in the same run, then the leader and etcd killed mid-run under fio verify, and policy propagation measured (needs `lab up --targets 3`)", Run: runClusterAutonomic})
}

// ClusterSummary is cluster-autonomic's summary.json.
type ClusterSummary struct {
	Experiment  string   `json:"experiment"`
	Scale       float64  `json:"scale"`
	ThresholdMs float64  `json:"threshold_ms"`
	Targets     []string `json:"targets"`
	// Placement is each initiator's target host: only bm serves the
	// reader, every target host serves writers.
	Placement map[string]string `json:"placement"`
	Baseline  ClusterPhase      `json:"baseline"`
	Local     ClusterPhase      `json:"local_only"`
	Cluster   ClusterPhase      `json:"cluster"`
	// PolicyPropagationMs is, per policy change, the time from the put to
	// every agent reporting the new threshold in its status.
	PolicyPropagationMs report.Dist   `json:"policy_propagation_ms"`
	PolicyChanges       []float64     `json:"policy_propagation_each_ms"`
	Faults              ClusterFaults `json:"faults"`
	// Pass is the Done-when: cluster p95 ≤ 1.25× threshold where
	// local-only is above it, the faults within their bounds with no I/O
	// error, every policy change everywhere within 1 s.
	Pass   bool     `json:"pass"`
	Failed []string `json:"failed,omitempty"`
}

// ClusterPhase is one phase's reader wait, writers' rates per target host
// and retransmissions.
type ClusterPhase struct {
	ReadWaitMs report.Dist `json:"read_wait_ms"`
	P95X       float64     `json:"p95_x_threshold,omitempty"`
	P99X       float64     `json:"p99_x_threshold,omitempty"`
	WriteMBs   float64     `json:"write_mb_s"`
	// WriteMBsByTarget: a writer does not escape by connecting through
	// another target host.
	WriteMBsByTarget map[string]float64 `json:"write_mb_s_by_target"`
	// MaxDelayMsByTarget is the largest write delay each target host's
	// agent applied during the phase.
	MaxDelayMsByTarget map[string]float64 `json:"max_delay_ms_by_target,omitempty"`
	TCP                lab.TCPCounters    `json:"tcp"`
	AgentCPUPct        map[string]float64 `json:"agent_cpu_pct_of_core,omitempty"`
}

// ClusterFaults is the faults phase: the resource's leader and then etcd
// killed (SIGKILL) while every target host throttles, under fio verify.
type ClusterFaults struct {
	ClusterPhase
	Leader string `json:"killed_leader"`
	// NewLeaderS is the time from the leader's kill to the first record
	// of another leader; the killed agent restarts after LeaderDownS.
	NewLeaderS  float64 `json:"new_leader_after_s"`
	LeaderDownS float64 `json:"leader_down_s"`
	// EtcdDownS is how long etcd stayed dead. ReleasedS is, per agent,
	// the time from etcd's death until the agent was back on its own
	// controller alone (mode local: the lost shared step fully decayed);
	// the bound is Fresh + Decay. (An agent's own controller may throttle
	// by itself: the verified writers' read-back gives every target host
	// reads of its own.)
	EtcdDownS float64 `json:"etcd_down_s"`
	// FellBackS is, per agent, the time from etcd's death until the agent
	// stopped following the shared step (mode degraded: its own
	// controller, the lost step decaying); the bound is 1 s.
	FellBackS map[string]float64 `json:"fell_back_after_etcd_loss_s"`
	ReleasedS map[string]float64 `json:"released_after_etcd_loss_s"`
	BoundS    float64            `json:"release_bound_s"`
	// RejoinedS is the time from etcd's restart until a shared step was
	// published again.
	RejoinedS float64 `json:"rejoined_after_etcd_back_s"`
	// Flaps counts, per agent, how often it left cluster mode again after
	// rejoining once etcd was back (0: rejoined without a flap).
	Flaps map[string]int `json:"flaps_after_rejoin"`
	// IOErrors is fio's verdict on the verified writers (crc32c written
	// and read back, verify_fatal): 0 when every byte came back.
	IOErrors int    `json:"io_errors"`
	FioError string `json:"fio_error,omitempty"`
}

// clusterRun is one cluster-autonomic invocation.
type clusterRun struct {
	r              *runner
	thr            time.Duration
	targets        []lab.TargetHost
	cfgs           map[string]string
	lead, on, tail time.Duration // a phase: reader alone, writers, reader alone
}

func (c *clusterRun) mkPhase(name, label string, writers int) *lab.Phase {
	return c.mkPhaseOn(name, label, writers, c.on)
}

// mkPhaseOn is a phase whose writers run for on after the lead.
func (c *clusterRun) mkPhaseOn(name, label string, writers int, on time.Duration) *lab.Phase {
	length := c.lead + on + c.tail
	p := &lab.Phase{Name: name, Label: label, Length: length, From: c.lead, To: c.lead + on}
	p.Jobs = append([]lab.Job{c.r.reader(length)}, c.r.writers(writers, c.lead, on)...)
	return p
}

func (c *clusterRun) newAgents(withEtcd bool) (*clusterAgents, error) {
	ca := &clusterAgents{byNS: map[string]*lab.LabAgent{}, cfgs: c.cfgs, etcd: withEtcd, dir: c.r.Dir, maxDly: map[string]float64{}}
	for _, t := range c.targets {
		ca.order = append(ca.order, t.NS)
		if err := ca.start(t.NS); err != nil {
			ca.stop()
			return nil, err
		}
	}
	return ca, nil
}

// run runs phase p with agents ca (nil: none), sampling their delays.
func (c *clusterRun) run(p *lab.Phase, ca *clusterAgents) (*lab.PhaseResult, ClusterPhase, error) {
	var c0 map[string]float64
	if ca != nil {
		for at := 500 * time.Millisecond; at < p.Length; at += 500 * time.Millisecond {
			p.Events = append(p.Events, lab.Event{At: at, Name: "sample delays", Do: func() error { ca.sample(); return nil }})
		}
		c0 = ca.cpu()
	}
	t0 := time.Now()
	res, err := c.r.Run(p, 0)
	var cp ClusterPhase
	if res != nil {
		cp = c.phaseSummary(res)
	}
	if ca != nil {
		wall := time.Since(t0).Seconds()
		cp.AgentCPUPct = map[string]float64{}
		for ns, v := range ca.cpu() {
			cp.AgentCPUPct[ns] = report.Round(100*(v-c0[ns])/wall, 2)
		}
		cp.MaxDelayMsByTarget = ca.maxDly
	}
	return res, cp, err
}

func (c *clusterRun) phaseSummary(res *lab.PhaseResult) ClusterPhase {
	w := res.Window()
	cp := ClusterPhase{ReadWaitMs: report.RoundDist(report.Describe(report.Values(w, "b2", readWait))),
		WriteMBs: report.Round(report.Aggregate(w, lab.Hosts[1:], writeMBs), 2), WriteMBsByTarget: map[string]float64{}, TCP: res.TCP}
	if t := ms(c.thr); t > 0 {
		cp.P95X, cp.P99X = report.Round(cp.ReadWaitMs.P95/t, 3), report.Round(cp.ReadWaitMs.P99/t, 3)
	}
	by := map[string][]string{}
	for _, h := range lab.Hosts[1:] {
		ns := c.r.State.Options.TargetOf(h).NS
		by[ns] = append(by[ns], h)
	}
	for ns, hs := range by {
		cp.WriteMBsByTarget[ns] = report.Round(report.Aggregate(w, hs, writeMBs), 2)
	}
	return cp
}

// runClusterAutonomic runs local-only control, then cluster control on
// etcd, then the faults, then policy propagation, on one lab.
func runClusterAutonomic(r *runner) (any, error) {
	targets := r.State.Options.TargetHosts()
	if len(targets) < 3 {
		return nil, fmt.Errorf("cluster-autonomic needs three target hosts: run `sanqos-lab lab up --targets 3` (this lab has %d)", len(targets))
	}
	c, sum, err := newClusterRun(r, targets)
	if err != nil {
		return nil, err
	}
	cli, err := labEtcd()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	// A policy or records left by an earlier run would steer this one.
	if err := clearClusterKeys(cli); err != nil {
		return nil, fmt.Errorf("clearing the lab etcd: %w", err)
	}

	if _, sum.Baseline, err = c.run(c.mkPhase("baseline", "no regulation", 12), nil); err != nil {
		return sum, err
	}
	la, err := c.newAgents(false)
	if err != nil {
		return sum, err
	}
	_, sum.Local, err = c.run(c.mkPhase("local", "local control on each target host", 12), la)
	la.stop()
	if err != nil {
		return sum, err
	}
	ca, err := c.newAgents(true)
	if err != nil {
		return sum, err
	}
	_, sum.Cluster, err = c.run(c.mkPhase("cluster", "cluster control on etcd", 12), ca)
	if err == nil {
		// Policy propagation, with the cluster's agents still running.
		err = c.propagation(cli, ca, sum)
	}
	ca.stop()
	if err != nil {
		return sum, err
	}
	if err := clearClusterKeys(cli); err != nil {
		return sum, err
	}
	sum.Faults, err = c.faults(cli)
	sum.judge()
	return sum, err
}

// newClusterRun is the run's plan on the lab's target hosts, its summary's
// layout, and each target host's agent configuration written.
func newClusterRun(r *runner, targets []lab.TargetHost) (*clusterRun, *ClusterSummary, error) {
	c := &clusterRun{r: r, thr: 15 * time.Millisecond, targets: targets, cfgs: map[string]string{}}
	if len(r.opts.Thresholds) > 0 {
		c.thr = r.opts.Thresholds[0]
	}
	c.lead, c.on, c.tail = r.Scale(10*time.Second), r.Scale(60*time.Second), r.Scale(5*time.Second)
	sum := &ClusterSummary{Experiment: "cluster-autonomic", Scale: r.opts.Scale, ThresholdMs: ms(c.thr), Placement: map[string]string{}}
	for _, t := range targets {
		sum.Targets = append(sum.Targets, t.NS)
	}
	for _, h := range lab.Hosts {
		sum.Placement[h] = r.State.Options.TargetOf(h).NS
	}
	for _, t := range targets {
		path := filepath.Join(r.Dir, "agent-"+t.NS+".yaml")
		if err := r.writeAgentConfigOn(path, "delayline", "127.0.0.1:9311", c.thr, true, t); err != nil {
			return nil, nil, err
		}
		c.cfgs[t.NS] = path
	}
	return c, sum, nil
}

// clearClusterKeys deletes every policy and record under the cluster
// prefix.
func clearClusterKeys(cli *clientv3.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := cli.Delete(ctx, cluster.DefaultPrefix, clientv3.WithPrefix())
	cancel()
	return err
}

// propagation measures policy propagation to the running agents ca: the
// threshold moves by 1 ms and back, five times each way.
func (c *clusterRun) propagation(cli *clientv3.Client, ca *clusterAgents, sum *ClusterSummary) error {
	var err error
	for i := range 10 {
		next := c.thr + time.Millisecond
		if i%2 == 1 {
			next = c.thr
		}
		d, perr := propagate(cli, ca, next)
		if perr != nil {
			err = fmt.Errorf("policy change %d: %w", i, perr)
			break
		}
		sum.PolicyChanges = append(sum.PolicyChanges, report.Round(ms(d), 1))
	}
	sum.PolicyPropagationMs = report.RoundDist(report.Describe(sum.PolicyChanges))
	return err
}

// propagate puts a policy with threshold thr and returns the time until
// every agent's status shows it.
func propagate(cli *clientv3.Client, ca *clusterAgents, thr time.Duration) (time.Duration, error) {
	pol := cluster.NewPolicies(cli, cluster.DefaultPrefix, nil)
	want := ms(thr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t0 := time.Now()
	if _, err := pol.Put(ctx, []byte(fmt.Sprintf("threshold: %v\n", thr))); err != nil {
		return 0, err
	}
	pending := append([]string(nil), ca.order...)
	for len(pending) > 0 {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("agents %s did not apply threshold %v within 5 s", strings.Join(pending, ", "), thr)
		}
		var left []string
		for _, ns := range pending {
			var st agent.Status
			if err := ca.get(ns).Status(&st); err != nil || len(st.Resources) == 0 || st.Resources[0].ThresholdMs != want {
				left = append(left, ns)
			}
		}
		pending = left
		if len(pending) > 0 {
			// Polling another process's state: nothing to wait on.
			time.Sleep(2 * time.Millisecond)
		}
	}
	return time.Since(t0), nil
}

// judge applies the Done-when to the run.
func (s *ClusterSummary) judge() {
	var fail []string
	if s.Cluster.P95X > 1.25 {
		fail = append(fail, fmt.Sprintf("cluster control: reader p95 %.2fx threshold > 1.25x", s.Cluster.P95X))
	}
	if s.Local.P95X <= 1.25 {
		fail = append(fail, fmt.Sprintf("local-only control already holds p95 (%.2fx): the run shows no difference", s.Local.P95X))
	}
	if s.PolicyPropagationMs.N == 0 || s.PolicyPropagationMs.Max > 1000 {
		fail = append(fail, fmt.Sprintf("policy propagation max %.0f ms (want ≤ 1000 over %d changes)", s.PolicyPropagationMs.Max, s.PolicyPropagationMs.N))
	}
	f := s.Faults
	if f.IOErrors > 0 {
		fail = append(fail, "fio verify: "+f.FioError)
	}
	if f.NewLeaderS <= 0 {
		fail = append(fail, "no new leader after the leader was killed")
	}
	for ns, r := range f.FellBackS {
		if r < 0 || r > 1 {
			fail = append(fail, fmt.Sprintf("%s fell back to local control %.2f s after etcd died (want ≤ 1 s)", ns, r))
		}
	}
	for ns, n := range f.Flaps {
		if n > 0 {
			fail = append(fail, fmt.Sprintf("%s left cluster mode %d times after rejoining", ns, n))
		}
	}
	for ns, r := range f.ReleasedS {
		// One sample (100 ms) and one agent tick (100 ms) of slack.
		if r < 0 || r > f.BoundS+0.2 {
			fail = append(fail, fmt.Sprintf("%s still throttled %.2f s after etcd died (bound %.1f s)", ns, r, f.BoundS))
		}
	}
	sort.Strings(fail)
	s.Failed, s.Pass = fail, len(fail) == 0
}
