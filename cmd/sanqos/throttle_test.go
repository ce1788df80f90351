package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/throttle"
)

func TestSettingFromFlags(t *testing.T) {
	for _, c := range []struct {
		rd, wd, r, wr string
		want          throttle.Setting
		err           string
	}{
		{err: "give --read-delay"},
		{wd: "2ms", want: throttle.Setting{WriteDelay: 2 * time.Millisecond}},
		{r: "10MiB/s", want: throttle.Setting{Rate: 10 << 20}},
		{wr: "10MiB/s", want: throttle.Setting{WriteRate: 10 << 20}},
		{wd: "5ms", wr: "80Mbit/s", want: throttle.Setting{WriteDelay: 5 * time.Millisecond, WriteRate: 10e6}},
		{rd: "1ms", wd: "2ms", r: "1MB/s", wr: "2MB/s", want: throttle.Setting{ReadDelay: time.Millisecond, WriteDelay: 2 * time.Millisecond, Rate: 1e6, WriteRate: 2e6}},
		{wr: "fast", err: "write rate"},
	} {
		got, err := settingFromFlags(c.rd, c.wd, c.r, c.wr)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: err %v, want %q", c, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%+v: got %+v, %v", c, got, err)
		}
	}
}

func TestFmtRate(t *testing.T) {
	for _, c := range []struct {
		r    uint64
		want string
	}{{0, "-"}, {10e6, "10.00 MB/s"}, {10 << 20, "10.49 MB/s"}} {
		if got := fmtRate(c.r); got != c.want {
			t.Errorf("fmtRate(%d) = %q, want %q", c.r, got, c.want)
		}
	}
}
