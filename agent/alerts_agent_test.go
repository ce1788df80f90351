package agent

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/internal/testenv"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// stepSampler is diskstats that take no notice of throttles: vg1's one
// device (loop0) has its important reader's reads at 25 ms from the
// start and nobody else; vg2's reader (loop3) reads at 5 ms until a
// writer (loop1) starts at writerFrom, then at 25 ms.
type stepSampler struct {
	tick       int
	writerFrom int
	c          map[string]sample.Counters
}

func (s *stepSampler) Read(...string) (map[string]sample.Counters, error) {
	if s.c == nil {
		s.c = map[string]sample.Counters{}
	}
	s.tick++
	at := time.Unix(0, int64(s.tick)*1e8)
	add := func(dev string, reads, readMs, writes, wsect uint64) {
		c := s.c[dev]
		c.Device, c.Time = dev, at
		c.Reads, c.ReadTicks, c.ReadSectors = c.Reads+reads, c.ReadTicks+reads*readMs, c.ReadSectors+16*reads
		c.Writes, c.WriteSectors, c.WriteTicks = c.Writes+writes, c.WriteSectors+wsect, c.WriteTicks+writes*20
		s.c[dev] = c
	}
	add("loop0", 4, 25, 0, 0)
	if s.tick >= s.writerFrom {
		add("loop1", 0, 0, 30, 3900)
		add("loop3", 4, 25, 0, 0)
	} else {
		add("loop1", 0, 0, 0, 0)
		add("loop3", 4, 5, 0, 0)
	}
	out := make(map[string]sample.Counters, len(s.c))
	for k, v := range s.c {
		out[k] = v
	}
	return out, nil
}

// scrapes are a registry's gauges and counters as promtool's input
// series: one value per scrape, "_" where the series was absent.
type scrapes struct {
	n      int
	series map[string][]string
}

func (s *scrapes) add(t *testing.T, mfs []*dto.MetricFamily) {
	t.Helper()
	if s.series == nil {
		s.series = map[string][]string{}
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "sanqos_") {
			continue
		}
		for _, m := range mf.Metric {
			var v float64
			switch {
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Counter != nil:
				v = m.Counter.GetValue()
			default:
				continue // histograms: no rule here reads them
			}
			labels := []string{`job="sanqos"`, `instance="t1:9311"`}
			for _, l := range m.Label {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := mf.GetName() + "{" + strings.Join(labels, ", ") + "}"
			vals := s.series[key]
			for len(vals) < s.n {
				vals = append(vals, "_")
			}
			s.series[key] = append(vals, fmt.Sprintf("%g", v))
		}
	}
	s.n++
}

func (s *scrapes) yaml() string {
	keys := make([]string, 0, len(s.series))
	for k := range s.series {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "      - series: '%s'\n        values: '%s'\n", k, strings.Join(s.series[k], " "))
	}
	return b.String()
}

// expectedAlert is promtool's exp_alerts entry for alert on resource of
// instance t1:9311 at value (humanizeDuration's), its annotations
// rendered from the rules file.
func expectedAlert(t *testing.T, alert, resource, value string) string {
	t.Helper()
	var rf ruleFile
	readYAML(t, alertRules, &rf)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != alert {
				continue
			}
			fill := strings.NewReplacer("{{ $labels.resource }}", resource, "{{ $labels.instance }}", "t1:9311",
				"{{ $value | humanizeDuration }}", value, `"`, `\"`)
			return fmt.Sprintf("          - exp_labels: {severity: %s, job: sanqos, instance: \"t1:9311\", resource: %s}\n"+
				"            exp_annotations:\n              summary: \"%s\"\n              description: \"%s\"\n",
				r.Labels["severity"], resource, fill.Replace(r.Annotations["summary"]), fill.Replace(r.Annotations["description"]))
		}
	}
	t.Fatalf("no rule %s", alert)
	return ""
}

// The rules fire on what the agent exports, not only on hand-written
// series: the agent runs 17 minutes of virtual ticks, its registry is
// scraped every 15 s, and promtool evaluates the rules on the scrapes.
// vg1's reads wait 25 ms with nobody to slow: SanqosThresholdMissedNobodySlowed.
// vg2's writer is slowed, but the wait stays at 25 ms (the sampler takes
// no notice of delays): SanqosThresholdMissed. Each stays silent on the other.
func TestAlertsFireOnTheAgentsSeries(t *testing.T) {
	testenv.RequireCommands(t, "promtool")
	cfg, err := config.Parse([]byte(`backend: dry-run
resources:
  - name: vg1
    devices: [loop0]
    important: [10.99.0.2]
  - name: vg2
    devices: [loop1, loop3]
    important: [10.99.0.5]
`))
	if err != nil {
		t.Fatal(err)
	}
	const perScrape, minutes = 150, 17 // ticks of 100 ms
	ss := &stepSampler{writerFrom: 600}
	a := New(cfg, Deps{Throttle: throttle.NewMemory(), Sampler: ss, Log: slog.New(slog.DiscardHandler),
		NewController: func(*config.Config, config.Resource) Controller { return &propCtl{thr: 15} },
		NewSmoother:   func(float64) Smoother { return &lastValue{} }})
	a.SetTopology(&Topology{Resources: map[string]ResourceView{
		"vg1": {Devices: []string{"loop0"}, Consumers: map[netip.Addr][]string{reader: {"loop0"}}},
		"vg2": {Devices: []string{"loop1", "loop3"}, Consumers: map[netip.Addr][]string{writer: {"loop1"}, netip.MustParseAddr("10.99.0.5"): {"loop3"}}},
	}})
	var sc scrapes
	for i := 1; i <= minutes*600; i++ {
		if err := a.Step(time.Unix(0, int64(i)*1e8)); err != nil {
			t.Fatal(err)
		}
		if i%perScrape == 0 {
			mfs, err := a.reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			sc.add(t, mfs)
		}
	}
	rules, err := filepath.Abs(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	test := fmt.Sprintf(`rule_files: [%q]
evaluation_interval: 1m
tests:
  - interval: 15s
    input_series:
%s    alert_rule_test:
      - {eval_time: 3m, alertname: SanqosThresholdMissedNobodySlowed, exp_alerts: []}
      - eval_time: 9m
        alertname: SanqosThresholdMissedNobodySlowed
        exp_alerts:
%s      - {eval_time: 10m, alertname: SanqosThresholdMissed, exp_alerts: []}
      - eval_time: 16m
        alertname: SanqosThresholdMissed
        exp_alerts:
%s      - {eval_time: 16m, alertname: SanqosConsumerAtMaxDelay, exp_alerts: []}
`, rules, sc.yaml(), expectedAlert(t, "SanqosThresholdMissedNobodySlowed", "vg1", "25ms"), expectedAlert(t, "SanqosThresholdMissed", "vg2", "25ms"))
	path := filepath.Join(t.TempDir(), "agent.test.yml")
	if err := os.WriteFile(path, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("promtool", "test", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool on the agent's scrapes: %v\n%s", err, out)
	}
}
