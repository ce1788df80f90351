package throttle

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseDelay parses a delay such as "4.6ms" or "500us" and validates it
// against MaxDelay.
func ParseDelay(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("delay %q: want a duration such as 4.6ms or 500us", s)
	}
	if err := validateDelay(d); err != nil {
		return 0, err
	}
	return d, nil
}

var rateUnits = map[string]float64{
	"B": 1, "kB": 1e3, "KB": 1e3, "KiB": 1 << 10, "MB": 1e6, "MiB": 1 << 20, "GB": 1e9, "GiB": 1 << 30,
	"bit": 1.0 / 8, "kbit": 1e3 / 8, "Mbit": 1e6 / 8, "Gbit": 1e9 / 8,
}

// ParseRate parses a rate such as "10MiB/s", "80Mbit/s" or "500kB/s" into
// bytes/s. The "/s" is required so a size is never mistaken for a rate.
func ParseRate(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	body, ok := strings.CutSuffix(t, "/s")
	if !ok {
		return 0, fmt.Errorf("rate %q: want a number and unit per second, e.g. 10MiB/s or 80Mbit/s", s)
	}
	i := strings.IndexFunc(body, func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.') })
	if i <= 0 {
		return 0, fmt.Errorf("rate %q: missing number or unit", s)
	}
	v, err := strconv.ParseFloat(body[:i], 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("rate %q: %q is not a positive number", s, body[:i])
	}
	mult, ok := rateUnits[body[i:]]
	if !ok {
		return 0, fmt.Errorf("rate %q: unknown unit %q (B, kB, KiB, MB, MiB, GB, GiB, bit, kbit, Mbit, Gbit)", s, body[i:])
	}
	r := v * mult
	if r < 1 || r > MaxRate {
		return 0, fmt.Errorf("rate %q: outside 1 B/s .. %d B/s", s, uint64(MaxRate))
	}
	return uint64(r), nil
}
