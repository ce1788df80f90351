package main

import (
	"slices"

	"github.com/sanqos/sanqos/config"
)

// agentConfigFlags are the agent's flags that set what a config key
// sets: the flag, the key, and how the flag's value goes in.
var agentConfigFlags = []struct {
	flag, key string
	set       func(*config.Config, backendOptions)
}{
	{"backend", "backend", func(c *config.Config, o backendOptions) { c.Backend = o.Name }},
	{"iscsi-port", "iscsi_port", func(c *config.Config, o backendOptions) { c.ISCSIPort = o.Port }},
	{"interface", "device", func(c *config.Config, o backendOptions) { c.Device = o.Device }},
	{"device", "device", func(c *config.Config, o backendOptions) { c.Device = o.Device }}, // --interface's old name
	{"delay-ramp", "delay_ramp", func(c *config.Config, o backendOptions) { c.DelayRamp = o.Ramp }},
	{"delay-follow", "delay_follow", func(c *config.Config, o backendOptions) { c.DelayFollow = o.Follow }},
	{"write-delay-on", "write_delay_on", func(c *config.Config, o backendOptions) { c.WriteDelayOn = o.WriteOn }},
	{"quick-ack", "quick_ack", func(c *config.Config, o backendOptions) { c.QuickAck = o.QuickAck }},
}

// overrideConfig returns what puts the flags given on the command line
// (changed) over a config's keys, and the keys it replaces. The agent
// applies it to the config it starts with and to every config a reload
// (SIGHUP, the cluster's policy) brings, so an operator's --backend is
// never silently replaced by the file's backend, at start or later. bo
// holds the flags' values as parsed; they are checked where a flag's
// would be (newBackend, the throttle registry).
func overrideConfig(changed func(string) bool, bo backendOptions) (func(*config.Config), []string) {
	var keys []string
	for _, f := range agentConfigFlags {
		if changed(f.flag) && !slices.Contains(keys, f.key) {
			keys = append(keys, f.key)
		}
	}
	return func(c *config.Config) {
		if c == nil {
			return
		}
		for _, f := range agentConfigFlags {
			if changed(f.flag) {
				f.set(c, bo)
			}
		}
	}, keys
}
