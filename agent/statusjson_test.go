package agent

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func TestStatusJSONRoundTripsNaN(t *testing.T) {
	in := Status{Backend: "dry-run", Resources: []ResourceStatus{{
		Name: "vg1", IndicatorMs: math.NaN(), RawWaitMs: math.Inf(1), ThresholdMs: 15, Step: 2, Delay: time.Millisecond,
		Throttleable: []string{"10.0.0.3"}, Consumers: []ConsumerStatus{{Addr: "10.0.0.3", WriteBps: 1e6, ReadBps: math.NaN(), Throttled: true}},
	}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"indicator_ms":null`, `"raw_wait_ms":null`, `"threshold_ms":15`, `"name":"vg1"`, `"delay_ns":1000000`, `"read_bps":null`, `"write_bps":1000000`, `"throttled":true`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	var out Status
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	r := out.Resources[0]
	if !math.IsNaN(r.IndicatorMs) || r.ThresholdMs != 15 || r.Step != 2 || r.Delay != time.Millisecond || r.Name != "vg1" ||
		r.Consumers[0].WriteBps != 1e6 || !math.IsNaN(r.Consumers[0].ReadBps) || !r.Consumers[0].Throttled {
		t.Fatalf("round trip: %+v", r)
	}
}
