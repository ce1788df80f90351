package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ResourceOverview is what etcd holds about one resource: its last shared
// record and the agents whose indicators are alive (under their leases).
type ResourceOverview struct {
	Resource string   `json:"resource"`
	Shared   *Shared  `json:"shared,omitempty"`
	Agents   []string `json:"agents"`
}

// Overview reads every resource's keys under prefix in one request, for
// operators (`sanqos cluster status`); it changes nothing.
func Overview(ctx context.Context, cli *clientv3.Client, prefix string) ([]ResourceOverview, error) {
	root := strings.TrimRight(cmp.Or(prefix, DefaultPrefix), "/") + "/resources/"
	resp, err := cli.Get(ctx, root, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	byName := map[string]*ResourceOverview{}
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), root)
		name, sub, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		o := byName[name]
		if o == nil {
			o = &ResourceOverview{Resource: name}
			byName[name] = o
		}
		switch {
		case sub == "delay":
			var s Shared
			if json.Unmarshal(kv.Value, &s) == nil {
				o.Shared = &s
			}
		case strings.HasPrefix(sub, "agents/"):
			o.Agents = append(o.Agents, strings.TrimPrefix(sub, "agents/"))
		}
	}
	out := make([]ResourceOverview, 0, len(byName))
	for _, o := range byName {
		sort.Strings(o.Agents)
		out = append(out, *o)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Resource < out[k].Resource })
	return out, nil
}
