package agent

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestResourceStatusJSONNonFinite(t *testing.T) {
	tests := []struct {
		name string
		in   ResourceStatus
		want []string
	}{
		{"no reads this interval", ResourceStatus{Name: "vg1", IndicatorMs: 12.5, RawWaitMs: math.NaN(), ThresholdMs: 15},
			[]string{`"name":"vg1"`, `"indicator_ms":12.5`, `"raw_wait_ms":null`, `"threshold_ms":15`}},
		{"infinite indicator", ResourceStatus{Name: "x", IndicatorMs: math.Inf(1), RawWaitMs: 3},
			[]string{`"indicator_ms":null`, `"raw_wait_ms":3`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal([]ResourceStatus{tc.in})
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("%s lacks %s", b, w)
				}
			}
			if strings.Count(string(b), `"indicator_ms"`) != 1 {
				t.Errorf("indicator_ms twice: %s", b)
			}
			var back []ResourceStatus
			if err := json.Unmarshal(b, &back); err != nil || back[0].Name != tc.in.Name {
				t.Errorf("round trip: %v %+v", err, back)
			}
		})
	}
}
