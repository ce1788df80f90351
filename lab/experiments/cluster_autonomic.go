package experiments

import (
	"context"

	"github.com/sanqos/sanqos/lab"
)

// clusterAutonomic: Three target hosts, local vs cluster control, faults.
type clusterAutonomic struct{}

func (clusterAutonomic) Spec() Spec {
	return Spec{Name: "cluster-autonomic", DefaultScale: 0.5, Flags: FlagThresholds | FlagAgentSet | FlagLUNMap,
		Title: "Three target hosts in front of one resource, writers on all: local-only control vs cluster control on etcd in the same run, then the leader and etcd killed mid-run under fio verify, and policy propagation measured (needs `lab up --targets 3`)"}
}

func (clusterAutonomic) Run(_ context.Context, r *lab.Runner, o Options) (any, error) {
	return runClusterAutonomic(wrap(r, o))
}
