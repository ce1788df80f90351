package throttle

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestWriteRateValidation(t *testing.T) {
	for _, c := range []struct {
		s    Setting
		want string
	}{
		{Setting{WriteRate: MaxRate}, ""},
		{Setting{WriteRate: MaxRate + 1}, "write rate"},
		{Setting{Rate: 1, WriteRate: 1}, ""},
	} {
		err := c.s.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.s, err, c.want)
		}
	}
	if (Setting{WriteRate: 1}).IsZero() {
		t.Error("a write cap alone is not zero")
	}
	b, _ := json.Marshal(Setting{WriteRate: 7})
	if !strings.Contains(string(b), `"write_rate_bytes_per_s":7`) {
		t.Errorf("json %s", b)
	}
}

// The delay line cannot cap; it says so before touching anything.
func TestDelayLineRefusesWriteRate(t *testing.T) {
	d := &DelayLine{}
	err := d.Set(map[netip.Addr]Setting{netip.MustParseAddr("10.0.0.2"): {WriteRate: 1000}})
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("err = %v, want ErrUnsupported", err)
	}
}
