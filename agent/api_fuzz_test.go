package agent

import (
	"strings"
	"testing"

	"github.com/sanqos/sanqos/throttle"
)

// Hostile API bodies get an error, never a panic; whatever is accepted is
// within every limit, so nothing half-valid reaches a backend.
func FuzzDecodeThrottleRequest(f *testing.F) {
	for _, s := range []string{
		`{"consumers":{"10.0.0.3":{"write_delay_ns":2000000}}}`,
		`{"consumers":{"fe80::1%eth0":{"read_delay_ns":1}}}`,
		`{"consumers":{"::ffff:10.0.0.1":{"rate_bytes_per_s":1000}}}`,
		`{"consumers":{"10.0.0.3":{"write_delay_ns":-1}}}`,
		`{"consumers":{}} {}`,
		`{"consumers":{"10.0.0.3":{"bogus":1}}}`,
		`[`, ``,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		set, err := DecodeThrottleRequest(strings.NewReader(body))
		if err != nil {
			if set != nil {
				t.Fatalf("error %v with a result", err)
			}
			return
		}
		if len(set) == 0 || len(set) > MaxConsumers {
			t.Fatalf("accepted %d consumers", len(set))
		}
		for a, s := range set {
			if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
				t.Fatalf("accepted address %v", a)
			}
			if err := s.Validate(); err != nil {
				t.Fatalf("accepted invalid setting %+v: %v", s, err)
			}
		}
		if err := throttle.ValidateAll(set); err != nil {
			t.Fatal(err)
		}
	})
}
