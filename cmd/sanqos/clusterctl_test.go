package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/internal/etcdtest"
)

// The operator's commands against a real etcd: a valid policy is written
// and read back, a bad one is refused with its line and writes nothing,
// and status shows what the agents published.
func TestClusterPolicyAndStatusCommands(t *testing.T) {
	srv := etcdtest.Start(t)
	ep := srv.Endpoint()
	if _, err := run(t, "cluster", "--etcd", ep, "--etcd-prefix", "/t", "policy", "get"); err == nil || !strings.Contains(err.Error(), "no policy") {
		t.Fatalf("get with nothing stored: %v", err)
	}
	dir := t.TempDir()
	good, bad := writeFile(t, dir, "good.yaml", "threshold: 12ms\nresources:\n  - {name: vg1, threshold: 9ms}\n"),
		writeFile(t, dir, "bad.yaml", "threshold: 12ms\nresources:\n  - {name: vg1, devices: [sda]}\n")
	out, err := run(t, "cluster", "--etcd", ep, "--etcd-prefix", "/t", "policy", "put", good)
	if err != nil || !strings.Contains(out, "policy written at revision") {
		t.Fatalf("put: %v %q", err, out)
	}
	if _, err := run(t, "cluster", "--etcd", ep, "--etcd-prefix", "/t", "policy", "put", bad); err == nil || !strings.Contains(err.Error(), "devices") || !strings.Contains(err.Error(), "nothing written") {
		t.Fatalf("bad policy: %v", err)
	}
	// A stale revision is refused too.
	if _, err := run(t, "cluster", "--etcd", ep, "--etcd-prefix", "/t", "policy", "put", "--if-revision", "1", good); err == nil {
		t.Fatal("put with a stale --if-revision succeeded")
	}
	out, err = run(t, "cluster", "--etcd", ep, "--etcd-prefix", "/t", "policy", "get")
	if err != nil || !strings.Contains(out, "9ms") {
		t.Fatalf("get after a refused put: %v %q (want the good policy)", err, out)
	}
	cli := srv.Client()
	defer cli.Close()
	rec, _ := json.Marshal(cluster.Shared{Seq: 7, Leader: "bm2", Time: time.Now(), Step: 4, DelayNs: int64(2 * time.Millisecond)})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for k, v := range map[string]string{"/t/resources/vg1/delay": string(rec), "/t/resources/vg1/agents/bm": "{}", "/t/resources/vg1/agents/bm2": "{}"} {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	out, err = run(t, "cluster", "--etcd", ep, "--etcd-prefix", "/t", "status")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "vg1") {
			line = l
		}
	}
	for _, want := range []string{"bm2", "7", "2ms", "bm,bm2"} {
		if !strings.Contains(line, want) {
			t.Errorf("status line %q lacks %q", line, want)
		}
	}
	if _, err := run(t, "cluster", "policy", "get"); err == nil || !strings.Contains(err.Error(), "--etcd") {
		t.Fatalf("without --etcd: %v", err)
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
