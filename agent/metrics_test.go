package agent

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/throttle"
)

// countingThrottle is a Memory with the delay line's counters, so the
// delay line's registry collector and the API's optional interfaces are
// exercised without netfilter.
type countingThrottle struct{ *throttle.Memory }

// Name is the delay line's, whose registry entry's collector reads the
// counters.
func (countingThrottle) Name() string { return "delayline" }

func (countingThrottle) Counters() map[netip.Addr]throttle.DelayCounters {
	return map[netip.Addr]throttle.DelayCounters{writer: {Packets: 10, Bytes: 660, Acks: 9, PassedAtLimit: 1}}
}

func (countingThrottle) Stats() throttle.DelayLineStats {
	l := throttle.Lateness{Count: 3, Sum: 5100 * time.Microsecond, Max: 5 * time.Millisecond}
	l.Counts[0], l.Counts[2], l.Counts[7] = 1, 1, 1 // 40 µs, 60 µs, 5 ms
	return throttle.DelayLineStats{Held: 3, Unclassified: 2, Errors: 0, Late: l}
}

func fixedStatus() []ResourceStatus {
	return []ResourceStatus{{
		Name: "vg1", IndicatorMs: 16.5, RawWaitMs: 18, ThresholdMs: 15, Step: 4, Delay: 2 * time.Millisecond,
		Onsets: 2, FeedForwardMs: 12.5, FloorMs: 6.4, RateLeverStep: 3, Updated: time.Unix(1764150000, 5e8),
		Throttleable: []string{writer.String()}, Slowed: 1, MaxWriteDelay: 2 * time.Millisecond,
		IO: ResourceIO{IOTotals: IOTotals{ReadBytes: 8192, WrittenBytes: 65536, Reads: 1, Writes: 2, ReadWaitSeconds: 0.018, WriteWaitSeconds: 0.5},
			IndicatorReads: 1, IndicatorReadWaitSeconds: 0.018},
		Consumers: []ConsumerStatus{
			{Addr: reader.String(), ReadBps: 1e6, IO: ConsumerIO{IOTotals: IOTotals{ReadBytes: 8192, Reads: 1, ReadWaitSeconds: 0.018}, HasBytes: true, HasIO: true}},
			{Addr: writer.String(), WriteBps: 13e6, Throttled: true, IO: ConsumerIO{IOTotals: IOTotals{WrittenBytes: 65536}, HasBytes: true}},
		},
	}}
}

// Scrapes the collector over HTTP as Prometheus would and checks every
// metric the operator's dashboard uses is there, with its unit in the name,
// and that promlint (the naming conventions) has nothing to say.
func TestMetricsScrape(t *testing.T) {
	mem := throttle.NewMemory()
	if err := mem.Set(map[netip.Addr]throttle.Setting{writer: {WriteDelay: 2 * time.Millisecond, Rate: 5e6, WriteRate: 3e6}}); err != nil {
		t.Fatal(err)
	}
	c := newCollector(fixedStatus, countingThrottle{mem})
	if probs, err := testutil.CollectAndLint(c); err != nil || len(probs) > 0 {
		t.Fatalf("promlint: %v %v", probs, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	for _, want := range []string{
		`sanqos_resource_indicator_seconds{resource="vg1"} 0.0165`,
		`sanqos_resource_read_wait_seconds_total{resource="vg1"} 0.018`,
		`sanqos_resource_write_wait_seconds_total{resource="vg1"} 0.5`,
		`sanqos_resource_reads_total{resource="vg1"} 1`,
		`sanqos_resource_writes_total{resource="vg1"} 2`,
		`sanqos_resource_read_bytes_total{resource="vg1"} 8192`,
		`sanqos_resource_written_bytes_total{resource="vg1"} 65536`,
		`sanqos_resource_indicator_reads_total{resource="vg1"} 1`,
		`sanqos_resource_indicator_read_wait_seconds_total{resource="vg1"} 0.018`,
		`sanqos_consumer_read_bytes_total{consumer="10.99.0.2",resource="vg1"} 8192`,
		`sanqos_consumer_reads_total{consumer="10.99.0.2",resource="vg1"} 1`,
		`sanqos_consumer_read_wait_seconds_total{consumer="10.99.0.2",resource="vg1"} 0.018`,
		`sanqos_consumer_written_bytes_total{consumer="10.99.0.3",resource="vg1"} 65536`,
		`# TYPE sanqos_resource_read_wait_seconds_total counter`,
		`# TYPE sanqos_consumer_read_bytes_total counter`,
		`sanqos_resource_threshold_seconds{resource="vg1"} 0.015`,
		`sanqos_resource_controller_output_steps{resource="vg1"} 4`,
		`sanqos_resource_controller_delay_seconds{resource="vg1"} 0.002`,
		`sanqos_resource_delay_seconds{direction="write",resource="vg1"} 0.002`,
		`sanqos_resource_delay_seconds{direction="read",resource="vg1"} 0`,
		`sanqos_resource_throttled_consumers{resource="vg1"} 1`,
		`sanqos_resource_throttleable_consumers{resource="vg1"} 1`,
		`sanqos_consumer_throttled{consumer="10.99.0.3",resource="vg1"} 1`,
		`sanqos_consumer_throttled{consumer="10.99.0.2",resource="vg1"} 0`,
		`sanqos_consumer_delay_seconds{consumer="10.99.0.3",direction="write"} 0.002`,
		`sanqos_consumer_delay_seconds{consumer="10.99.0.3",direction="read"} 0`,
		`sanqos_consumer_rate_cap_bytes_per_second{consumer="10.99.0.3"} 5e+06`,
		`sanqos_backend_info{backend="delayline"} 1`,
		`sanqos_resource_onsets_total{resource="vg1"} 2`,
		`sanqos_resource_feedforward_seconds{resource="vg1"} 0.0125`,
		`sanqos_resource_floor_seconds{resource="vg1"} 0.0064`,
		`sanqos_resource_unreachable{resource="vg1"} 0`,
		`sanqos_resource_rate_lever_steps{resource="vg1"} 3`,
		`sanqos_resource_updated_timestamp_seconds{resource="vg1"} 1.7641500005e+09`,
		`sanqos_consumer_write_rate_cap_bytes_per_second{consumer="10.99.0.3"} 3e+06`,
		`# TYPE sanqos_resource_indicator_seconds gauge`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("scrape lacks %q", want)
		}
	}
	// The writer's devices are shared: its I/Os and waits are unknown,
	// not zero; and the mislabelled and per-tick series are gone.
	for _, gone := range []string{
		`sanqos_consumer_reads_total{consumer="10.99.0.3"`,
		`sanqos_consumer_write_wait_seconds_total{consumer="10.99.0.3"`,
		`sanqos_resource_write_delay_seconds`,
		`sanqos_resource_read_wait_seconds{`,
		`sanqos_consumer_bytes_per_second`,
	} {
		if strings.Contains(body, gone) {
			t.Errorf("scrape has %q", gone)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

// The agent's own registry adds the tick histogram, discovery errors and the
// process/Go collectors; a backend without counters exports none of the
// delay-line series (absent, not zero, so dashboards do not show a fake 0).
func TestAgentRegistry(t *testing.T) {
	a := &Agent{reg: prometheus.NewRegistry()}
	a.ticks = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sanqos_tick_duration_seconds", Help: "h"})
	a.discErrs = prometheus.NewCounter(prometheus.CounterOpts{Name: "sanqos_discovery_errors_total", Help: "h"})
	a.reg.MustRegister(newCollector(func() []ResourceStatus { return nil }, throttle.NewMemory()), a.ticks, a.discErrs)
	a.ticks.Observe(0.0002)
	a.discErrs.Inc()
	for name, want := range map[string]int{
		"sanqos_tick_duration_seconds":   1,
		"sanqos_discovery_errors_total":  1,
		"sanqos_backend_info":            1,
		"sanqos_delayline_packets_total": 0,
		"sanqos_delayline_held_packets":  0,
	} {
		if n, err := testutil.GatherAndCount(a.reg, name); err != nil || n != want {
			t.Errorf("%s: %d series (%v), want %d", name, n, err, want)
		}
	}
	if probs, err := testutil.GatherAndLint(a.reg); err != nil || len(probs) > 0 {
		t.Fatalf("promlint: %v %v", probs, err)
	}
}

// exportedMetrics is every metric name the agent's registry exports: the
// collector's (whatever the status holds) and the registry's own.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	ch := make(chan *prometheus.Desc, 256)
	newCollector(nil, nil).Describe(ch)
	eventsCollector{}.Describe(ch) // no series until the first event
	portsCollector{}.Describe(ch)  // none while every port is throttled
	for _, b := range throttle.Entries() {
		if b.Collector != nil {
			b.Collector(nil).Describe(ch)
		}
	}
	close(ch)
	for d := range ch {
		known[regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())[1]] = true
	}
	cfg := config.Defaults()
	mfs, err := New(&cfg, Deps{Throttle: throttle.NewMemory()}).reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		known[mf.GetName()] = true
	}
	return known
}

// isExported says whether a query's series name is one of known's, or a
// histogram's or summary's series of one.
func isExported(known map[string]bool, series string) bool {
	for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
		if name, ok := strings.CutSuffix(series, suffix); ok && known[name] {
			return true
		}
	}
	return false
}

// The Grafana dashboard in the repo must only query metrics the agent
// exports, so a renamed metric cannot leave an empty panel behind.
func TestGrafanaDashboardUsesExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../grafana/sanqos-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) {
		t.Fatal("dashboard is not valid JSON")
	}
	known := exportedMetrics(t)
	used := regexp.MustCompile(`sanqos_[a-z_]+`).FindAllString(string(b), -1)
	if len(used) < 10 {
		t.Fatalf("dashboard uses only %v", used)
	}
	for _, m := range used {
		if !isExported(known, m) {
			t.Errorf("dashboard queries %s, which the agent does not export", m)
		}
	}
}

// failingThrottle refuses every change, as a backend whose kernel objects
// went away would.
type failingThrottle struct{ *throttle.Memory }

func (failingThrottle) Set(map[netip.Addr]throttle.Setting) error { return errors.New("no such set") }

// The agent's registry carries the config's max_delay, and counts the
// batches the backend refused: the series the alert rules need to tell a
// consumer pinned at the ceiling and a backend that stopped taking changes.
func TestMaxDelayAndApplyErrorsExported(t *testing.T) {
	cfg := config.Defaults()
	cfg.MaxDelay = 30 * time.Millisecond
	a := New(&cfg, Deps{Throttle: failingThrottle{throttle.NewMemory()}, Log: slog.New(slog.DiscardHandler)})
	act := newActuator()
	wish := map[netip.Addr]throttle.Setting{writer: {WriteDelay: 2 * time.Millisecond}}
	a.loops.apply(&act, wish)
	a.loops.apply(&act, wish) // refused again: retried, counted again
	want := `
# HELP sanqos_max_delay_seconds The config's max_delay: the largest delay a controller gives a consumer.
# TYPE sanqos_max_delay_seconds gauge
sanqos_max_delay_seconds 0.03
# HELP sanqos_throttle_apply_errors_total Batches of throttle changes the backend refused (each is retried next tick; the log says why).
# TYPE sanqos_throttle_apply_errors_total counter
sanqos_throttle_apply_errors_total 2
`
	if err := testutil.GatherAndCompare(a.reg, strings.NewReader(want), "sanqos_max_delay_seconds", "sanqos_throttle_apply_errors_total"); err != nil {
		t.Fatal(err)
	}
	if probs, err := testutil.GatherAndLint(a.reg); err != nil || len(probs) > 0 {
		t.Fatalf("promlint: %v %v", probs, err)
	}
}

// reinstallingThrottle is a Memory whose guard has put its objects back
// twice.
type reinstallingThrottle struct{ *throttle.Memory }

func (reinstallingThrottle) Reinstalls() uint64 { return 2 }

// The backend's reinstalls of its removed kernel objects are a counter
// of the agent's registry (0 for a backend without a guard), for the
// alert on something that keeps flushing the firewall.
func TestThrottleReinstallsExported(t *testing.T) {
	cfg := config.Defaults()
	for _, tc := range []struct {
		th   throttle.Throttle
		want string
	}{{reinstallingThrottle{throttle.NewMemory()}, "2"}, {throttle.NewMemory(), "0"}} {
		a := New(&cfg, Deps{Throttle: tc.th, Log: slog.New(slog.DiscardHandler)})
		want := `
# HELP sanqos_throttle_reinstalls_total Times the backend found its kernel objects (rules, sets, qdiscs, filters) removed by someone else and reinstalled them with the current throttles.
# TYPE sanqos_throttle_reinstalls_total counter
sanqos_throttle_reinstalls_total ` + tc.want + "\n"
		if err := testutil.GatherAndCompare(a.reg, strings.NewReader(want), "sanqos_throttle_reinstalls_total"); err != nil {
			t.Error(err)
		}
	}
}

func TestMetricsClasses(t *testing.T) {
	status := func() []ResourceStatus {
		return []ResourceStatus{{Name: "vg1", Classes: []ClassStatus{{Name: "power", IOPS: 25, MBs: 1.6, LatencyMs: 12, CreditS: 4, Missing: true,
			ThroughputDeviationPct: -3, LatencyDeviationMs: 2.5, JitterMs: 1.5}}}}
	}
	c := newCollector(status, throttle.NewMemory())
	if probs, err := testutil.CollectAndLint(c); err != nil || len(probs) > 0 {
		t.Fatalf("promlint: %v %v", probs, err)
	}
	want := `
# HELP sanqos_class_throughput_deviation_percent Seed 004 eq. (1) over the class's life: (attained − expected)/expected × 100, MB/s.
# TYPE sanqos_class_throughput_deviation_percent gauge
sanqos_class_throughput_deviation_percent{class="power",resource="vg1"} -3
# HELP sanqos_class_latency_deviation_seconds Seed 004 eq. (2) over the class's life: observed − expected latency.
# TYPE sanqos_class_latency_deviation_seconds gauge
sanqos_class_latency_deviation_seconds{class="power",resource="vg1"} 0.0025
# HELP sanqos_class_missing 1 while the SLO class misses an objective.
# TYPE sanqos_class_missing gauge
sanqos_class_missing{class="power",resource="vg1"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "sanqos_class_throughput_deviation_percent",
		"sanqos_class_latency_deviation_seconds", "sanqos_class_missing"); err != nil {
		t.Fatal(err)
	}
}

// sanqos_resource_mapped is 1 for a mapped resource and 0 for one
// discovery could not map (the alert on an unmapped resource reads it).
func TestResourceMappedExported(t *testing.T) {
	status := func() []ResourceStatus {
		return []ResourceStatus{{Name: "vg1", Devices: []string{"loop0"}}, {Name: "vg9", Unmapped: "no discovered pool matches"}}
	}
	want := `
# HELP sanqos_resource_mapped 1 while discovery maps the configured resource to devices, 0 while it is unmapped (it then measures and slows nothing; status and the log say why).
# TYPE sanqos_resource_mapped gauge
sanqos_resource_mapped{resource="vg1"} 1
sanqos_resource_mapped{resource="vg9"} 0
`
	if err := testutil.CollectAndCompare(newCollector(status, throttle.NewMemory()), strings.NewReader(want), "sanqos_resource_mapped"); err != nil {
		t.Fatal(err)
	}
}
