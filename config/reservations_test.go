package config

import (
	"strings"
	"testing"
	"time"
)

const resvOK = `resources:
  - name: vg1
    policy: reservations
    capacity_mb_s: 3
    reservations:
      - consumer: 10.99.0.2
        bytes: 1000000
        period: 1s
      - consumer: 10.99.0.3
        ios: 50
        period: 500ms
`

func TestReservationsValid(t *testing.T) {
	c, err := Parse([]byte(resvOK))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Resources[0]
	if len(r.Reservations) != 2 || r.Reservations[1].IOs != 50 || r.Reservations[0].Period != time.Second {
		t.Fatalf("reservations %+v", r.Reservations)
	}
	if r.NetThreshold != DefaultNetThreshold {
		t.Fatalf("net_threshold default: %v", r.NetThreshold)
	}
	if len(c.Warnings) != 0 {
		t.Fatalf("1 MB/s of 3 reserved warns: %v", c.Warnings)
	}
}

// Every problem of a reservations resource at once, each with its line.
func TestReservationsErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"rate missing", "resources:\n  - name: a\n    policy: reservations\n    reservations:\n      - consumer: 10.0.0.1\n        period: 1s\n",
			"line 5: resources[0].reservations[0]: want exactly one of bytes or ios"},
		{"both units", "resources:\n  - name: a\n    policy: reservations\n    reservations:\n      - consumer: 10.0.0.1\n        bytes: 1\n        ios: 1\n        period: 1s\n",
			"line 5: resources[0].reservations[0]: want exactly one"},
		{"negative rate", "resources:\n  - name: a\n    policy: reservations\n    reservations:\n      - consumer: 10.0.0.1\n        bytes: -5\n        period: 1s\n",
			"want exactly one of bytes or ios, > 0"},
		{"period too short", "resources:\n  - name: a\n    policy: reservations\n    reservations:\n      - consumer: 10.0.0.1\n        bytes: 1000\n        period: 100ms\n",
			"line 7: resources[0].reservations[0].period: 100ms: want 500ms..1m0s"},
		{"period too long", "resources:\n  - name: a\n    policy: reservations\n    reservations:\n      - consumer: 10.0.0.1\n        bytes: 1000\n        period: 2h\n",
			"line 7: resources[0].reservations[0].period"},
		{"bad consumer", "resources:\n  - name: a\n    policy: reservations\n    reservations:\n      - consumer: nope\n        bytes: 1000\n        period: 1s\n",
			"line 5: resources[0].reservations[0].consumer: nope: not an IP address"},
		{"twice", "resources:\n  - name: a\n    policy: reservations\n    reservations:\n      - {consumer: 10.0.0.1, bytes: 1, period: 1s}\n      - {consumer: 10.0.0.1, bytes: 1, period: 1s}\n",
			"line 6: resources[0].reservations[1].consumer: 10.0.0.1: has a reservation already"},
		{"reserved and throttleable", "resources:\n  - name: a\n    policy: reservations\n    throttleable: [10.0.0.1]\n    reservations:\n      - {consumer: 10.0.0.1, bytes: 1, period: 1s}\n",
			"line 6: resources[0].reservations[0].consumer: 10.0.0.1: listed throttleable"},
		{"none", "resources:\n  - name: a\n    policy: reservations\n", "line 3: resources[0].policy: reservations: policy reservations needs at least one reservation"},
		{"over capacity", "resources:\n  - name: a\n    policy: reservations\n    capacity_mb_s: 1.5\n    reservations:\n      - {consumer: 10.0.0.1, bytes: 1000000, period: 1s}\n      - {consumer: 10.0.0.2, bytes: 1000000, period: 2s}\n      - {consumer: 10.0.0.3, bytes: 1000000, period: 4s}\n",
			"line 5: resources[0].reservations: byte reservations sum to 1.75 MB/s, more than capacity_mb_s 1.5"},
		{"net threshold", "resources:\n  - name: a\n    policy: reservations\n    net_threshold: 5s\n    reservations:\n      - {consumer: 10.0.0.1, bytes: 1, period: 1s}\n",
			"line 4: resources[0].net_threshold: 5s: want 100us..1s"},
		{"other policy", "resources:\n  - name: a\n    net_threshold: 5ms\n    reservations:\n      - {consumer: 10.0.0.1, bytes: 1, period: 1s}\n",
			"line 4: resources[0].reservations: reservations apply to policy reservations only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	// All at once: the other-policy case has two problems.
	_, err := Parse([]byte("resources:\n  - name: a\n    net_threshold: 5ms\n    reservations:\n      - {consumer: 10.0.0.1, bytes: 1, period: 1s}\n"))
	if n := strings.Count(err.Error(), "\n") + 1; n != 2 {
		t.Fatalf("want 2 errors, got %d: %v", n, err)
	}
}

// Reservations over 80 % of the stated capacity are allowed, with a warning.
func TestReservationsNearCapacityWarns(t *testing.T) {
	c, err := Parse([]byte("resources:\n  - name: a\n    policy: reservations\n    capacity_mb_s: 1\n    reservations:\n      - {consumer: 10.0.0.1, bytes: 900000, period: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "line 5: resources[0].reservations: byte reservations sum to 0.9 MB/s, over 80%") {
		t.Fatalf("warnings %q", c.Warnings)
	}
}

func TestReservationsExampleIsValid(t *testing.T) {
	c, err := Load("../examples/reservations.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Resources[0]; r.Policy != "reservations" || len(r.Reservations) != 2 || len(c.Warnings) != 0 {
		t.Fatalf("%+v, warnings %v", r, c.Warnings)
	}
}
