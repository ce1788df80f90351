package agent

import (
	"encoding/json"
	"math"
)

// MarshalJSON writes non-finite figures as null: a resource whose devices
// saw no read in the last interval has no read wait (NaN), and
// encoding/json refuses NaN outright, which would turn the whole status
// into an error for every client.
func (s ResourceStatus) MarshalJSON() ([]byte, error) {
	type plain ResourceStatus // no MarshalJSON: no recursion
	return json.Marshal(struct {
		plain
		IndicatorMs *float64 `json:"indicator_ms"`
		RawWaitMs   *float64 `json:"raw_wait_ms"`
		ThresholdMs *float64 `json:"threshold_ms"`
	}{plain(s), finiteOrNil(s.IndicatorMs), finiteOrNil(s.RawWaitMs), finiteOrNil(s.ThresholdMs)})
}

func finiteOrNil(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}
