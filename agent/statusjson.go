package agent

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/sanqos/sanqos/throttle"
)

// JSONFloat is a float64 that encodes NaN and ±Inf as JSON null (and null
// back as NaN). A resource whose devices had no reads has no read wait
// (NaN, not 0 ms); encoding/json refuses NaN, which used to turn the whole
// status document into an empty reply.
type JSONFloat float64

// MarshalJSON writes null for values JSON cannot carry.
func (f JSONFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(v) // encoding/json's number format
}

// UnmarshalJSON reads null as NaN.
func (f *JSONFloat) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = JSONFloat(math.NaN())
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	*f = JSONFloat(v)
	return err
}

// The status types are defined with the loops (loop.go); their JSON form
// lives here so the NaN handling does not touch the control code. Decoding maps null back to NaN,
// so a client (sanqos status) can tell "no reads" from 0 ms. Fields of the
// embedded plain copy are shadowed by the same-named JSONFloat ones.

type resourceStatusPlain ResourceStatus

type resourceStatusJSON struct {
	*resourceStatusPlain
	IndicatorMs JSONFloat `json:"indicator_ms"`
	RawWaitMs   JSONFloat `json:"raw_wait_ms"`
	ThresholdMs JSONFloat `json:"threshold_ms"`
	// DelayMs is Delay in ms, written for readers and not read back
	// (delay_ns is the field decoded).
	DelayMs float64 `json:"delay_ms"`
}

// MarshalJSON writes non-finite figures as null.
func (s ResourceStatus) MarshalJSON() ([]byte, error) {
	return json.Marshal(resourceStatusJSON{(*resourceStatusPlain)(&s), JSONFloat(s.IndicatorMs), JSONFloat(s.RawWaitMs), JSONFloat(s.ThresholdMs), ms(s.Delay)})
}

// UnmarshalJSON decodes null as NaN.
func (s *ResourceStatus) UnmarshalJSON(b []byte) error {
	aux := resourceStatusJSON{resourceStatusPlain: (*resourceStatusPlain)(s)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	s.IndicatorMs, s.RawWaitMs, s.ThresholdMs = float64(aux.IndicatorMs), float64(aux.RawWaitMs), float64(aux.ThresholdMs)
	return nil
}

type consumerStatusPlain ConsumerStatus

type consumerStatusJSON struct {
	*consumerStatusPlain
	ReadBps   JSONFloat   `json:"read_bps"`
	WriteBps  JSONFloat   `json:"write_bps"`
	WriteEWMA JSONFloat   `json:"write_bps_ewma"`
	Setting   settingJSON `json:"setting,omitzero"`
}

// MarshalJSON encodes missing rates as null.
func (c ConsumerStatus) MarshalJSON() ([]byte, error) {
	return json.Marshal(consumerStatusJSON{(*consumerStatusPlain)(&c), JSONFloat(c.ReadBps), JSONFloat(c.WriteBps), JSONFloat(c.WriteEWMA), newSettingJSON(c.Setting)})
}

// UnmarshalJSON decodes null as NaN.
func (c *ConsumerStatus) UnmarshalJSON(b []byte) error {
	aux := consumerStatusJSON{consumerStatusPlain: (*consumerStatusPlain)(c)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	c.ReadBps, c.WriteBps, c.WriteEWMA = float64(aux.ReadBps), float64(aux.WriteBps), float64(aux.WriteEWMA)
	c.Setting = aux.Setting.Setting
	return nil
}

// settingJSON is a throttle setting as the status document writes it:
// each delay in ns, as the control API takes it (and the field decoded),
// and in ms beside it, the unit of the thresholds and waits around it, so
// a script reading the status meets one unit throughout. The control
// API's own requests stay throttle.Setting (it refuses unknown fields).
type settingJSON struct {
	throttle.Setting
	ReadDelayMs  float64 `json:"read_delay_ms"`
	WriteDelayMs float64 `json:"write_delay_ms"`
}

func newSettingJSON(s throttle.Setting) settingJSON {
	return settingJSON{s, ms(s.ReadDelay), ms(s.WriteDelay)}
}

type statusPlain Status

type statusJSON struct {
	*statusPlain
	Throttles map[string]settingJSON `json:"throttles"`
}

// MarshalJSON writes each throttle's delays in ns and ms.
func (s Status) MarshalJSON() ([]byte, error) {
	var t map[string]settingJSON
	if s.Throttles != nil {
		t = make(map[string]settingJSON, len(s.Throttles))
		for k, v := range s.Throttles {
			t[k] = newSettingJSON(v)
		}
	}
	return json.Marshal(statusJSON{(*statusPlain)(&s), t})
}
