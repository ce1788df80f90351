package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

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

// clusterAgents are one agent per target host.
type clusterAgents struct {
	mu     sync.Mutex
	byNS   map[string]*lab.LabAgent
	order  []string
	cfgs   map[string]string
	etcd   bool
	dir    string
	maxDly map[string]float64
}

func (c *clusterAgents) start(ns string) error {
	args := []string{"--config", c.cfgs[ns]}
	if c.etcd {
		args = append(args, "--etcd", lab.EtcdURL(), "--etcd-id", ns)
	}
	a, err := lab.StartAgentIn(ns, "cl-"+ns, "delayline", c.dir, args...)
	if err != nil {
		return fmt.Errorf("agent in %s: %w", ns, err)
	}
	c.mu.Lock()
	c.byNS[ns] = a
	c.mu.Unlock()
	return nil
}

func (c *clusterAgents) get(ns string) *lab.LabAgent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byNS[ns]
}

func (c *clusterAgents) stop() {
	for _, ns := range c.order {
		if a := c.get(ns); a != nil {
			a.Stop()
		}
	}
}

// sample records each agent's largest write delay now.
func (c *clusterAgents) sample() map[string]float64 {
	out := map[string]float64{}
	for _, ns := range c.order {
		a := c.get(ns)
		if a == nil {
			continue
		}
		m, err := a.List()
		if err != nil {
			out[ns] = math.NaN() // restarting
			continue
		}
		d := 0.0
		for _, s := range m {
			d = math.Max(d, float64(s.WriteDelay)/1e6)
		}
		out[ns] = d
		c.mu.Lock()
		c.maxDly[ns] = math.Max(c.maxDly[ns], d)
		c.mu.Unlock()
	}
	return out
}

// modes reads each agent's cluster status (/api/cluster, served on
// 127.0.0.1 inside the agent's namespace): where its step comes from.
func (c *clusterAgents) modes() map[string]cluster.ResourceStatus {
	out := map[string]cluster.ResourceStatus{}
	for _, ns := range c.order {
		hc := &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return lab.DialInNS(ctx, ns, addr) }}}
		resp, err := hc.Get("http://127.0.0.1:9311/api/cluster")
		if err != nil {
			continue // restarting
		}
		var doc struct {
			Resources []cluster.ResourceStatus `json:"resources"`
		}
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		hc.CloseIdleConnections()
		if err == nil && len(doc.Resources) > 0 {
			out[ns] = doc.Resources[0]
		}
	}
	return out
}

func (c *clusterAgents) cpu() map[string]float64 {
	out := map[string]float64{}
	for _, ns := range c.order {
		if a := c.get(ns); a != nil {
			out[ns] = lab.CPUSeconds(a.Pid())
		}
	}
	return out
}

// labEtcd is a client of the lab's etcd from this process: its
// connections are made inside the switch namespace.
func labEtcd() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints: []string{lab.EtcdURL()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return lab.DialInNS(ctx, lab.SwitchNS, addr)
		})},
	})
}

// leaderOf reads the resource's shared record (who leads, its sequence).
// The lab etcd answers in a millisecond; a short timeout keeps the 100 ms
// samples on time while it is dead.
func leaderOf(cli *clientv3.Client, res string) (cluster.Shared, error) {
	var s cluster.Shared
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	resp, err := cli.Get(ctx, cluster.DelayKey(cluster.DefaultPrefix, res))
	if err != nil {
		return s, err
	}
	if len(resp.Kvs) == 0 {
		return s, errors.New("no shared record")
	}
	return s, json.Unmarshal(resp.Kvs[0].Value, &s)
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
			cp.AgentCPUPct[ns] = round(100*(v-c0[ns])/wall, 2)
		}
		cp.MaxDelayMsByTarget = ca.maxDly
	}
	return res, cp, err
}

func (c *clusterRun) phaseSummary(res *lab.PhaseResult) ClusterPhase {
	w := res.Window()
	cp := ClusterPhase{ReadWaitMs: roundDist(report.Describe(report.Values(w, "b2", readWait))),
		WriteMBs: round(report.Aggregate(w, lab.Hosts[1:], writeMBs), 2), WriteMBsByTarget: map[string]float64{}, TCP: res.TCP}
	if t := ms(c.thr); t > 0 {
		cp.P95X, cp.P99X = round(cp.ReadWaitMs.P95/t, 3), round(cp.ReadWaitMs.P99/t, 3)
	}
	by := map[string][]string{}
	for _, h := range lab.Hosts[1:] {
		ns := c.r.State.Options.TargetOf(h).NS
		by[ns] = append(by[ns], h)
	}
	for ns, hs := range by {
		cp.WriteMBsByTarget[ns] = round(report.Aggregate(w, hs, writeMBs), 2)
	}
	return cp
}

func runClusterAutonomic(r *runner) (any, error) {
	targets := r.State.Options.TargetHosts()
	if len(targets) < 3 {
		return nil, fmt.Errorf("cluster-autonomic needs three target hosts: run `sanqos lab up --targets 3` (this lab has %d)", len(targets))
	}
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
			return nil, err
		}
		c.cfgs[t.NS] = path
	}
	cli, err := labEtcd()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	// A policy or records left by an earlier run would steer this one.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err = cli.Delete(ctx, cluster.DefaultPrefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
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
		// Policy propagation, with the cluster's agents still running: the
		// threshold moves by 1 ms and back, five times each way.
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
			sum.PolicyChanges = append(sum.PolicyChanges, round(ms(d), 1))
		}
		sum.PolicyPropagationMs = roundDist(report.Describe(sum.PolicyChanges))
	}
	ca.stop()
	if err != nil {
		return sum, err
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	_, err = cli.Delete(ctx, cluster.DefaultPrefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return sum, err
	}
	sum.Faults, err = c.faults(cli)
	sum.judge()
	return sum, err
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

// faultSample is one 100 ms look at the cluster during the faults phase.
type faultSample struct {
	at     time.Duration
	delays map[string]float64
	rec    cluster.Shared
	recErr error
	modes  map[string]cluster.ResourceStatus
}

// faults runs the writers (three time-based and one verified thread per
// writer host) under cluster control, kills the resource's leader a
// quarter into the writers' window (restarting it 2 s later, as a
// supervisor would) and etcd at half (restarting it after 8 s, longer
// than Fresh + Decay, so the release is seen whole).
func (c *clusterRun) faults(cli *clientv3.Client) (ClusterFaults, error) {
	f := ClusterFaults{ReleasedS: map[string]float64{}, FellBackS: map[string]float64{}, Flaps: map[string]int{}, BoundS: (cluster.DefaultFresh + cluster.DefaultDecay).Seconds(), LeaderDownS: 2, EtcdDownS: 8}
	ca, err := c.newAgents(true)
	if err != nil {
		return f, err
	}
	defer ca.stop()
	// The faults come after the cluster has settled, each far enough
	// from the next to be seen whole; the writers run until etcd has been
	// back for a while.
	etcdDown := time.Duration(f.EtcdDownS * float64(time.Second))
	killLeaderAt := c.lead + max(c.on/4, 3*time.Second)
	killEtcdAt := killLeaderAt + max(c.on/4, 6*time.Second)
	on := max(c.on, killEtcdAt+etcdDown+6*time.Second-c.lead)
	p := c.mkPhaseOn("faults", "cluster control; leader and etcd killed", 9, on)
	// The time-based writers keep to the first three quarters of each LUN
	// and the verified writer to the last, so no job overwrites what
	// another will check.
	lun := c.r.State.Options.LUNSize
	size := min(max(int64(c.r.opts.Scale*32)<<20, 8<<20), lun/4) / 65536 * 65536
	for i := range p.Jobs {
		if p.Jobs[i].Name == "writer" {
			p.Jobs[i].Size = lun / 4 / 65536 * 65536
		}
	}
	for _, h := range lab.Hosts[1:] {
		j := c.r.verifiedWriter(h, 1, size)
		j.Start, j.Offset = c.lead, lun/4*3/65536*65536
		p.Jobs = append(p.Jobs, j)
	}
	var (
		mu      sync.Mutex
		samples []faultSample
		killed  string
		etcdAt  [2]time.Duration // killed, restarted
		errs    []error
		restart sync.WaitGroup // the killed leader's and etcd's restarts
	)
	note := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	t0 := time.Now()
	go func() {
		defer close(done)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		leaderDone, etcdDone := false, false
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			at := time.Since(t0)
			s := faultSample{at: at, delays: ca.sample(), modes: ca.modes()}
			s.rec, s.recErr = leaderOf(cli, c.r.Res.Name)
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
			switch {
			case !leaderDone && at >= killLeaderAt:
				leaderDone = true
				if s.recErr != nil {
					note(fmt.Errorf("no leader to kill at %v: %w", at, s.recErr))
					continue
				}
				killed = s.rec.Leader
				a := ca.get(killed)
				if a == nil {
					note(fmt.Errorf("leader %q is not one of the lab's agents", killed))
					continue
				}
				a.Kill()
				restart.Add(1)
				go func() {
					defer restart.Done()
					time.Sleep(time.Duration(f.LeaderDownS * float64(time.Second)))
					if err := ca.start(killed); err != nil {
						note(err)
					}
				}()
			case !etcdDone && at >= killEtcdAt:
				etcdDone = true
				if err := lab.KillEtcd(); err != nil {
					note(err)
					continue
				}
				mu.Lock()
				etcdAt[0] = time.Since(t0)
				mu.Unlock()
				restart.Add(1)
				go func() {
					defer restart.Done()
					time.Sleep(etcdDown)
					if err := lab.StartEtcd(); err != nil {
						note(err)
					}
					mu.Lock()
					etcdAt[1] = time.Since(t0)
					mu.Unlock()
				}()
			}
		}
	}()
	res, cp, err := c.run(p, ca)
	close(stop)
	<-done
	restart.Wait()
	if !lab.EtcdRunning() {
		if serr := lab.StartEtcd(); serr != nil && err == nil {
			err = serr
		}
	}
	f.ClusterPhase, f.Leader = cp, killed
	if res != nil && res.FioErr != nil {
		f.IOErrors, f.FioError = 1, res.FioErr.Error()
		err = nil // judged below, reported in the summary
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		return f, errors.Join(errs...)
	}
	c.judgeFaults(&f, samples, killLeaderAt, etcdAt)
	if werr := c.writeTimeline(samples); err == nil {
		err = werr
	}
	return f, err
}

// judgeFaults reads the samples: the first record of a new leader after
// the kill; per agent, the first sample off the shared step (fell back),
// the first on its own controller alone (released) after etcd died, and
// how often it left cluster mode after rejoining; the first new record
// after etcd came back.
func (c *clusterRun) judgeFaults(f *ClusterFaults, samples []faultSample, killLeaderAt time.Duration, etcdAt [2]time.Duration) {
	sort.Slice(samples, func(i, k int) bool { return samples[i].at < samples[k].at })
	for _, s := range samples {
		if s.at > killLeaderAt && s.recErr == nil && s.rec.Leader != f.Leader && f.NewLeaderS == 0 {
			f.NewLeaderS = round((s.at - killLeaderAt).Seconds(), 2)
		}
	}
	for _, t := range c.targets {
		f.FellBackS[t.NS] = -1
		for _, s := range samples {
			if m, ok := s.modes[t.NS]; ok && s.at >= etcdAt[0] && m.Mode != cluster.ModeCluster {
				f.FellBackS[t.NS] = round((s.at - etcdAt[0]).Seconds(), 2)
				break
			}
		}
		joined := false
		for _, s := range samples {
			m, ok := s.modes[t.NS]
			if !ok || etcdAt[1] == 0 || s.at < etcdAt[1] {
				continue
			}
			if m.Mode == cluster.ModeCluster {
				joined = true
			} else if joined {
				f.Flaps[t.NS]++
				joined = false
			}
		}
		f.ReleasedS[t.NS] = -1 // not released while etcd was down
		for _, s := range samples {
			m, ok := s.modes[t.NS]
			if ok && s.at >= etcdAt[0] && (etcdAt[1] == 0 || s.at < etcdAt[1]) && m.Mode == cluster.ModeLocal {
				f.ReleasedS[t.NS] = round((s.at - etcdAt[0]).Seconds(), 2)
				break
			}
		}
	}
	var seq uint64
	for _, s := range samples {
		if s.at < etcdAt[0] && s.recErr == nil {
			seq = max(seq, s.rec.Seq)
		}
		if etcdAt[1] > 0 && s.at > etcdAt[1] && s.recErr == nil && s.rec.Seq > seq {
			f.RejoinedS = round((s.at - etcdAt[1]).Seconds(), 2)
			break
		}
	}
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

// writeTimeline saves the faults phase's samples (faults-timeline.csv):
// per 100 ms, the leader's record and each agent's largest write delay.
func (c *clusterRun) writeTimeline(samples []faultSample) error {
	var b strings.Builder
	b.WriteString("t_s,leader,seq,shared_step,record_error")
	for _, t := range c.targets {
		b.WriteString(",delay_ms_" + t.NS + ",mode_" + t.NS + ",applied_step_" + t.NS)
	}
	b.WriteString("\n")
	for _, s := range samples {
		e := ""
		if s.recErr != nil {
			e = strings.ReplaceAll(s.recErr.Error(), ",", ";")
		}
		fmt.Fprintf(&b, "%.2f,%s,%d,%d,%s", s.at.Seconds(), s.rec.Leader, s.rec.Seq, s.rec.Step, e)
		for _, t := range c.targets {
			m, ok := s.modes[t.NS]
			if !ok {
				m.Mode, m.Applied = "down", math.NaN()
			}
			fmt.Fprintf(&b, ",%g,%s,%g", s.delays[t.NS], m.Mode, m.Applied)
		}
		b.WriteString("\n")
	}
	return os.WriteFile(filepath.Join(c.r.Dir, "faults-timeline.csv"), []byte(b.String()), 0o644)
}
