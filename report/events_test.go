package report

import (
	"reflect"
	"testing"
)

// A run's digest counts the kinds, and per consumer what happened, the
// directions and the reasons with their figures folded, so two slow
// events with different queues are one reason counted twice.
func TestDigestEvents(t *testing.T) {
	if DigestEvents(nil) != nil {
		t.Fatal("no events: no digest")
	}
	d := DigestEvents([]EventRecord{
		{"10.99.0.4", "slow", "read", "saturates the resource: 3.5 requests queued ≥ throttleable_queue 1.25"},
		{"10.99.0.3", "slow", "read", "saturates the resource: 3.6 requests queued ≥ throttleable_queue 1.25"},
		{"10.99.0.3", "held", "read", "held while idle: it keeps its delays for its next burst (idle_hold)"},
		{"10.99.0.3", "direction", "both", "direction changed: both, was read (its load: 60% reads)"},
		{"10.99.0.3", "slow", "read", "saturates the resource: 4 requests queued ≥ throttleable_queue 1.25"},
		{"10.99.0.3", "release", "", "released: resource below threshold"},
	})
	want := &ThrottleEvents{Total: 6, ByKind: map[string]int{"slow": 3, "held": 1, "direction": 1, "release": 1}, Consumers: []ConsumerEvents{
		{Consumer: "10.99.0.3", Kinds: map[string]int{"slow": 2, "held": 1, "direction": 1, "release": 1}, Directions: []string{"read", "both"},
			Reasons: map[string]int{"saturates the resource: N requests queued ≥ throttleable_queue N": 2,
				"held while idle: it keeps its delays for its next burst (idle_hold)": 1,
				"direction changed: both, was read (its load: N% reads)":              1, "released: resource below threshold": 1}},
		{Consumer: "10.99.0.4", Kinds: map[string]int{"slow": 1}, Directions: []string{"read"},
			Reasons: map[string]int{"saturates the resource: N requests queued ≥ throttleable_queue N": 1}},
	}}
	if !reflect.DeepEqual(d, want) {
		t.Fatalf("digest\n %+v\nwant %+v", d, want)
	}
}
