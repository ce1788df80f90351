package main

import (
	"math"
	"strings"
	"testing"
)

// Bad backend options are refused before anything touches the kernel.
func TestNewBackendRefusesBadOptions(t *testing.T) {
	for _, c := range []struct {
		o    backendOptions
		want string
	}{
		{backendOptions{Name: "delayline", Port: 3260, Ramp: -1}, "delay-ramp"},
		{backendOptions{Name: "delayline", Port: 3260, Ramp: 50}, "delay-ramp"},
		{backendOptions{Name: "delayline", Port: 3260, Ramp: math.NaN()}, "delay-ramp"},
		{backendOptions{Name: "delayline", Port: 3260, Ramp: 0.5, Follow: true}, "delay-follow and delay-ramp"},
		{backendOptions{Name: "delayline", Port: 0}, "iscsi-port"},
		{backendOptions{Name: "delayline", Port: 3260, QueueLimit: -1}, "queue-limit"},
	} {
		if _, err := newBackend(c.o, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want one naming %s", c.o, err, c.want)
		}
	}
}
