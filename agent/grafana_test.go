package agent

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// dashboard is what of the Grafana dashboard's JSON the test reads.
type dashboard struct {
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
			Query      struct {
				Query string `json:"query"`
			} `json:"query"`
			Multi      bool `json:"multi"`
			IncludeAll bool `json:"includeAll"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// instanceScoped is a selector that keeps only the chosen agent's series.
const instanceScoped = `instance=~"$instance"`

// One dashboard serves every target: an instance variable lists the
// agents Prometheus scrapes, and every series a panel or the resource
// list reads is that agent's, so two targets' resources and consumers
// never mix in one panel.
func TestGrafanaDashboardPerInstance(t *testing.T) {
	b, err := os.ReadFile("../grafana/sanqos-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	vars := map[string]int{}
	for i, v := range d.Templating.List {
		vars[v.Name] = i
	}
	i, ok := vars["instance"]
	if !ok {
		t.Fatal("no instance variable")
	}
	inst := d.Templating.List[i]
	if inst.Query.Query != "label_values(sanqos_backend_info, instance)" || inst.Definition != inst.Query.Query {
		t.Errorf("instance variable lists %q (definition %q), want every agent's instance", inst.Query.Query, inst.Definition)
	}
	// A sum over the panels' series would add two targets' figures.
	if inst.Multi || inst.IncludeAll {
		t.Error("instance variable allows several agents at once: the panels' sums would mix targets")
	}
	if r, ok := vars["resource"]; !ok || r < i {
		t.Error("resource variable missing, or before instance (it depends on it)")
	}
	selector := regexp.MustCompile(`sanqos_[a-z_]+(\{[^}]*\})?`)
	scoped := func(where, expr string) {
		sels := selector.FindAllStringSubmatch(expr, -1)
		if len(sels) == 0 {
			t.Errorf("%s: %q reads no sanqos series", where, expr)
		}
		for _, s := range sels {
			if !strings.Contains(s[1], instanceScoped) {
				t.Errorf("%s: %s is not scoped to $instance in %q", where, s[0], expr)
			}
		}
	}
	n := 0
	for _, v := range d.Templating.List {
		if v.Name != "instance" {
			scoped("variable "+v.Name, v.Query.Query)
			scoped("variable "+v.Name+" definition", v.Definition)
		}
	}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			n++
			scoped("panel "+p.Title, q.Expr)
		}
	}
	if n < 15 {
		t.Fatalf("read only %d panel queries", n)
	}
}
