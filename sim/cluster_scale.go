package sim

// The cluster-scale scenario (issue 22, item 6): many agents sharing one
// policy and one controller per resource through etcd, at a size no test
// can start (100 agents, 1,000 resources, 10,000 consumers), on virtual
// time. Each agent runs package cluster's own Node — its session,
// publisher, watches, campaigns and balancer, goroutines and all — through
// cluster.KV and cluster.Runtime (cluster_kv.go, cluster_runtime.go), and
// agent.NewPID for the local and the shared controllers; ValidatePolicy
// and Merge take each policy. What is modelled is everything around it:
// etcd (one linearizable store with client latency, group commit, an
// apply cost, watches with their history, leases and elections), the
// operator's policy puts, the agents' policy watch, and the back end each
// resource's agents measure.
//
// Like the rest of package sim it reads no wall clock inside the model:
// virtual-time figures are the same for a seed. The CPU figures are the
// exception, by design: they time the real per-agent code on this
// machine.

import (
	"time"

	"github.com/sanqos/sanqos/cluster"
)

// ClusterScaleOptions size the cluster-scale scenario.
type ClusterScaleOptions struct {
	Agents    int `json:"agents"`
	Resources int `json:"resources"`
	Consumers int `json:"consumers"`
	// Spread is how many agents serve each resource (the target hosts
	// in front of it); a resource's consumers are dealt among them.
	Spread    int           `json:"spread"`
	Length    time.Duration `json:"length_ns"`
	Seed      uint64        `json:"seed"`
	Threshold time.Duration `json:"threshold_ns"`
	Etcd      EtcdModel     `json:"etcd"`
	// Rates are counted over [Warmup, KillAt) (the cluster formed, no
	// failure yet).
	Warmup time.Duration `json:"warmup_ns"`
	// Policies policy changes are put every PolicyEvery from PolicyFrom.
	Policies    int           `json:"policies"`
	PolicyFrom  time.Duration `json:"policy_from_ns"`
	PolicyEvery time.Duration `json:"policy_every_ns"`
	// KillAt: the agent leading the most resources dies (0: never).
	// OutageAt: etcd stops answering for the rest of the run (0: never).
	KillAt   time.Duration `json:"kill_at_ns"`
	OutageAt time.Duration `json:"outage_at_ns"`
	// The cluster's timing (cluster.Config; defaults: package cluster's).
	TTL          int           `json:"ttl_s"`
	Fresh        time.Duration `json:"fresh_ns"`
	Decay        time.Duration `json:"decay_ns"`
	Blend        time.Duration `json:"blend_ns"`
	PublishEvery time.Duration `json:"publish_every_ns"`
	// BalanceEvery and BalanceHold: the leaders' balancing (negative
	// BalanceEvery: none, the first to campaign keeps what it wins).
	BalanceEvery time.Duration `json:"balance_every_ns"`
	BalanceHold  time.Duration `json:"balance_hold_ns"`
}

// DefaultClusterScale is the size: 100 agents, 1,000 resources
// each behind 3 of them, 10,000 consumers; five policy changes, the
// busiest leader killed at 20 s, etcd lost at 30 s, 36 s in all (the
// last Decay fits).
func DefaultClusterScale() ClusterScaleOptions {
	return ClusterScaleOptions{Agents: 100, Resources: 1000, Consumers: 10000, Spread: 3, Length: 36 * time.Second, Seed: 1,
		Threshold: 15 * time.Millisecond, Etcd: DefaultEtcd(), Warmup: 3 * time.Second,
		Policies: 5, PolicyFrom: 5 * time.Second, PolicyEvery: 3 * time.Second, KillAt: 20 * time.Second, OutageAt: 30 * time.Second,
		TTL: cluster.DefaultTTL, Fresh: cluster.DefaultFresh, Decay: cluster.DefaultDecay, Blend: cluster.DefaultBlend,
		PublishEvery: cluster.DefaultPublishEvery, BalanceEvery: cluster.DefaultBalanceEvery, BalanceHold: cluster.DefaultBalanceHold}
}

// RunClusterScale runs the scenario.
func RunClusterScale(o ClusterScaleOptions) (*ClusterScaleSummary, error) {
	s, err := newClusterSim(o)
	if err != nil {
		return nil, err
	}
	s.run()
	return s.summary(), nil
}
