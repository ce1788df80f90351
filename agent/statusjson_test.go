package agent

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
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
