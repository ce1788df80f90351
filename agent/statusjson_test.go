package agent

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/throttle"
)

// TestStatusJSONRoundTripsNaN: the status document encodes non-finite
// figures (no reads: NaN; ±Inf) as null and finite ones as numbers,
// carries each shadowed field once (statusjson.go lays JSONFloat fields
// over a plain copy of the struct), and decodes null back as NaN.
func TestStatusJSONRoundTripsNaN(t *testing.T) {
	in := Status{Backend: "dry-run", Resources: []ResourceStatus{{
		Name: "vg1", IndicatorMs: math.NaN(), RawWaitMs: math.Inf(1), ThresholdMs: 15, Step: 2, Delay: time.Millisecond,
		Throttleable: []string{"10.0.0.3"}, Consumers: []ConsumerStatus{{Addr: "10.0.0.3", WriteBps: 1e6, ReadBps: math.NaN(), Throttled: true}},
	}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"indicator_ms":null`, `"raw_wait_ms":null`, `"threshold_ms":15`, `"name":"vg1"`, `"delay_ns":1000000`, `"delay_ms":1`, `"read_bps":null`, `"write_bps":1000000`, `"throttled":true`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	for _, key := range []string{"indicator_ms", "raw_wait_ms", "threshold_ms", "read_bps", "write_bps", "write_bps_ewma"} {
		if n := strings.Count(string(b), `"`+key+`"`); n != 1 {
			t.Errorf("%s %d times in %s", key, n, b)
		}
	}
	var out Status
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	r := out.Resources[0]
	if !math.IsNaN(r.IndicatorMs) || !math.IsNaN(r.RawWaitMs) || r.ThresholdMs != 15 || r.Step != 2 || r.Delay != time.Millisecond || r.Name != "vg1" ||
		r.Consumers[0].WriteBps != 1e6 || !math.IsNaN(r.Consumers[0].ReadBps) || !r.Consumers[0].Throttled {
		t.Fatalf("round trip: %+v", r)
	}
}

// Every delay in the status document is in ms beside its ns, the unit of
// the thresholds and waits next to it: the resource's delay, each
// consumer's setting and each throttle; the ns fields still decode.
func TestStatusJSONDelaysInMs(t *testing.T) {
	set := throttle.Setting{ReadDelay: 4600 * time.Microsecond, WriteDelay: 2 * time.Millisecond, Rate: 1e6}
	in := Status{Backend: "dry-run", Resources: []ResourceStatus{{Name: "vg1", ThresholdMs: 15, Delay: 2 * time.Millisecond,
		Consumers: []ConsumerStatus{{Addr: "10.0.0.3", Setting: set}, {Addr: "10.0.0.4"}}}},
		Throttles: map[string]throttle.Setting{"10.0.0.3": set}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for key, n := range map[string]int{`"threshold_ms":15`: 1, `"delay_ms":2`: 1, `"read_delay_ms":4.6`: 2, `"write_delay_ms":2`: 2,
		`"read_delay_ns":4600000`: 2, `"write_delay_ns":2000000`: 2, `"rate_bytes_per_s":1000000`: 2, `"setting"`: 1} {
		if got := strings.Count(string(b), key); got != n {
			t.Errorf("%s %d times, want %d: %s", key, got, n, b)
		}
	}
	var out Status
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Throttles["10.0.0.3"] != set || out.Resources[0].Consumers[0].Setting != set || out.Resources[0].Consumers[1].Setting != (throttle.Setting{}) {
		t.Errorf("round trip: %+v", out)
	}
	if b, _ := json.Marshal(Status{}); !strings.Contains(string(b), `"throttles":null`) {
		t.Errorf("no throttles: %s", b)
	}
}
