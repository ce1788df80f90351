package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/control"
	"github.com/sanqos/sanqos/internal/cli"
)

// etcdOptions are the agent's --etcd flags. Without endpoints the agent
// runs alone, exactly as before.
type etcdOptions struct {
	Endpoints string
	ID        string
	Prefix    string
	// Fresh and Decay bound a lost shared step (cluster.Config): followed
	// for Fresh after it arrived, then decayed to zero over Decay.
	Fresh, Decay time.Duration
}

// validate checks the bounds before anything starts: a step followed
// for longer than a second, or left to decay for more than a minute, is
// a throttle that outlives the cluster that set it.
func (o etcdOptions) validate() error {
	if o.Fresh < 100*time.Millisecond || o.Fresh > time.Second {
		return cli.Usagef("--etcd-fresh %v: want 100ms..1s", o.Fresh)
	}
	if o.Decay < 100*time.Millisecond || o.Decay > time.Minute {
		return cli.Usagef("--etcd-decay %v: want 100ms..1m", o.Decay)
	}
	return nil
}

// clusterRun is an agent's membership of a cluster: its etcd client, its
// node (indicators, elections, shared delays) and the policy it follows.
type clusterRun struct {
	opts   etcdOptions
	cli    *clientv3.Client
	node   *cluster.Node
	log    *slog.Logger
	cfg    atomic.Pointer[config.Config] // the config in force, for the leader's PID
	policy atomic.Pointer[[]byte]        // the cluster policy in force (nil: none yet)
	// details is each resource's traffic and consumers from the agent's
	// last status, refreshed every interval (see feedDetails).
	mu       sync.Mutex
	details  map[string]cluster.Indicator
	refusals atomic.Pointer[string]
}

// startCluster connects to etcd and joins. The agent still starts if etcd
// is down: the node runs local control until etcd answers.
func startCluster(o etcdOptions, cfg *config.Config, log *slog.Logger) (*clusterRun, error) {
	if o.ID == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("--etcd-id: no hostname to default to: %w", err)
		}
		o.ID = h
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: strings.Split(o.Endpoints, ","), DialTimeout: 2 * time.Second,
		// Keepalive pings notice a dead etcd between requests.
		DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	c := &clusterRun{opts: o, cli: cli, log: log, details: map[string]cluster.Indicator{}}
	c.cfg.Store(cfg)
	c.node, err = cluster.NewNode(cluster.Config{Client: cli, Prefix: o.Prefix, AgentID: o.ID, PublishEvery: cfg.Interval,
		Fresh: o.Fresh, Decay: o.Decay,
		Step: cfg.DelayStep, NewController: c.sharedPID, Log: log.With("cluster", o.ID)})
	if err != nil {
		cli.Close()
		return nil, err
	}
	log.Info("cluster: joining", "etcd", o.Endpoints, "id", o.ID, "prefix", o.Prefix)
	return c, nil
}

// sharedPID is the leader's controller of a resource: the agent's own PID
// with the config in force (which carries the cluster policy).
func (c *clusterRun) sharedPID(res string) (control.Controller, error) {
	cfg := c.cfg.Load()
	for _, r := range cfg.Resources {
		if r.Name == res {
			if p, ok := agent.NewPID(cfg, r).(control.Controller); ok {
				return p, nil
			}
			return nil, errors.New("the agent's controller is not a control.Controller")
		}
	}
	return nil, fmt.Errorf("resource %s is not in this agent's config", res)
}

// newController routes each resource's controller through the cluster.
func (c *clusterRun) newController(cfg *config.Config, r config.Resource) agent.Controller {
	return cluster.Controller(c.node, r.Name, newPID(cfg, r), nil, c.detailsOf)
}

func (c *clusterRun) detailsOf(res string) cluster.Indicator {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.details[res]
}

// feedDetails copies the agent's per-resource status (traffic, consumers,
// who is throttleable) for the published indicators, every interval: a
// tick late, which is what a status can be.
func (c *clusterRun) feedDetails(ctx context.Context, a *agent.Agent, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m := map[string]cluster.Indicator{}
		for _, st := range a.Resources() {
			m[st.Name] = cluster.Details(st)
		}
		c.mu.Lock()
		c.details = m
		c.mu.Unlock()
	}
}

// load is the agent's config: its file, with the cluster policy laid over
// it when there is one. SIGHUP and policy changes both go through it, so
// neither drops the other.
func (c *clusterRun) load(path string) (*config.Config, error) {
	p := c.policy.Load()
	if p == nil {
		return config.Load(path)
	}
	return cluster.MergeFile(path, *p)
}

// watchPolicy applies every new cluster policy through reload (the
// agent's own Reload, with its refusals); a refused one is logged and
// shown in /api/cluster, and the policy in force stays.
func (c *clusterRun) watchPolicy(ctx context.Context, path string, reload func(*config.Config) error) {
	pol := cluster.NewPolicies(c.cli, c.opts.Prefix, c.log)
	pol.Watch(ctx, func(doc []byte, rev int64) error {
		nc, err := cluster.MergeFile(path, doc)
		if err != nil {
			return err
		}
		if err := reload(nc); err != nil {
			return err
		}
		c.policy.Store(&doc)
		c.applied(nc)
		c.refusals.Store(nil)
		return nil
	}, func(rev int64, err error) {
		s := fmt.Sprintf("revision %d: %v", rev, err)
		c.refusals.Store(&s)
	})
}

// applied records the config in force (after SIGHUP or a policy) and
// rebuilds the shared controllers this agent leads with it.
func (c *clusterRun) applied(nc *config.Config) {
	c.cfg.Store(nc)
	c.node.Renew()
}

// register serves the cluster status at /api/cluster.
func (c *clusterRun) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/cluster", func(w http.ResponseWriter, r *http.Request) {
		doc := struct {
			Agent     string                   `json:"agent"`
			Prefix    string                   `json:"prefix"`
			Refused   string                   `json:"policy_refused,omitempty"`
			Policy    bool                     `json:"policy"`
			Resources []cluster.ResourceStatus `json:"resources"`
		}{Agent: c.node.ID(), Prefix: c.opts.Prefix, Policy: c.policy.Load() != nil, Resources: c.node.Status(time.Now())}
		if s := c.refusals.Load(); s != nil {
			doc.Refused = *s
		}
		writeJSONDoc(w, doc)
	})
}

// Close leaves the cluster (revoking the lease: this agent's keys go now).
func (c *clusterRun) Close() {
	c.node.Close()
	c.cli.Close()
}

func writeJSONDoc(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
