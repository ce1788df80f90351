package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/control"
	"github.com/sanqos/sanqos/internal/etcdtest"
	"github.com/sanqos/sanqos/throttle"
)

// TestAgentCluster wires an agent to a real etcd as --etcd does: a
// cluster policy reaches the agent's config (merged over its file) and the
// leader's controller, the resource's controller goes through the
// cluster, and /api/cluster shows the mode.
// It is one function because its checks run in order on one agent wired
// to one etcd, each on the state the one before set.
func TestAgentCluster(t *testing.T) {
	srv := etcdtest.Start(t)
	path := filepath.Join(t.TempDir(), "sanqos.yaml")
	own := "http: \"\"\ndiscovery: {source: static}\nresources:\n  - {name: vg1, devices: [loop3], threshold: 20ms}\n"
	if err := os.WriteFile(path, []byte(own), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	cl, err := startCluster(etcdOptions{Endpoints: srv.Endpoint(), ID: "host1", Prefix: "/c"}, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	a := agent.New(cfg, agent.Deps{Throttle: throttle.NewMemory(), Log: log, NewController: cl.newController, NewSmoother: newEWMA})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	applied := make(chan *config.Config, 4)
	go cl.watchPolicy(ctx, path, func(nc *config.Config) error {
		if err := a.Reload(nc); err != nil {
			return err
		}
		applied <- nc
		return nil
	})
	admin := srv.Client()
	defer admin.Close()
	if _, err := cluster.NewPolicies(admin, "/c", nil).Put(ctx, []byte("resources:\n  - {name: vg1, threshold: 7ms}\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case nc := <-applied:
		if nc.Resources[0].Threshold != 7*time.Millisecond || nc.Resources[0].Devices[0] != "loop3" {
			t.Fatalf("applied %+v: want the policy's threshold over the file's devices", nc.Resources[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("policy not applied in 10s")
	}
	// SIGHUP's load keeps the policy.
	if nc, err := cl.load(path); err != nil || nc.Resources[0].Threshold != 7*time.Millisecond {
		t.Fatalf("reload from the file dropped the policy: %v %+v", err, nc)
	}
	// The leader's controller is built with the policy's threshold.
	ctrl, err := cl.sharedPID("vg1")
	if err != nil {
		t.Fatal(err)
	}
	if th := ctrl.(*control.PID).Config().Threshold; th != 7 {
		t.Fatalf("shared PID threshold %v, want 7", th)
	}
	// The resource's controller goes through the node: alone in the
	// cluster, this agent leads and follows its own shared step.
	c := cl.newController(cfg, cfg.Resources[0])
	tk := time.NewTicker(cfg.Interval)
	defer tk.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for !cl.node.Leading("vg1") || cl.node.Status(time.Now())[0].Mode != cluster.ModeCluster {
		if time.Now().After(deadline) {
			t.Fatalf("not leading in cluster mode after 10s: %+v", cl.node.Status(time.Now()))
		}
		c.Update(30)
		<-tk.C
	}
	mux := http.NewServeMux()
	cl.register(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/api/cluster", nil))
	var doc struct {
		Agent     string
		Policy    bool
		Resources []cluster.ResourceStatus
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err, rec.Body.String())
	}
	if doc.Agent != "host1" || !doc.Policy || len(doc.Resources) != 1 || doc.Resources[0].Mode != cluster.ModeCluster || !doc.Resources[0].Leading {
		t.Fatalf("/api/cluster: %s", rec.Body.String())
	}
}
