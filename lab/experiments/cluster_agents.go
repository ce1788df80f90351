package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/lab"
)

// cluster-autonomic's agents, one per target host, and their etcd.

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
