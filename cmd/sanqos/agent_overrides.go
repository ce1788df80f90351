package main

import (
	"slices"

	"github.com/sanqos/sanqos/config"
)

// agentFlagValues are the values of the agent's flags that set config
// keys, as parsed.
type agentFlagValues struct {
	bo   backendOptions
	http string
}

// agentConfigFlags are the agent's flags that set what a config key
// sets: the flag, the key, and how the flag's value goes in.
var agentConfigFlags = []struct {
	flag, key string
	set       func(*config.Config, agentFlagValues)
}{
	{"backend", "backend", func(c *config.Config, v agentFlagValues) { c.Backend = v.bo.Name }},
	{"iscsi-port", "iscsi_port", func(c *config.Config, v agentFlagValues) { c.ISCSIPort, c.Ports = v.bo.Port, []int{v.bo.Port} }},
	{"interface", "device", func(c *config.Config, v agentFlagValues) { c.Device = v.bo.Device }},
	{"device", "device", func(c *config.Config, v agentFlagValues) { c.Device = v.bo.Device }}, // --interface's old name
	{"delay-follow", "delay_follow", func(c *config.Config, v agentFlagValues) { c.DelayFollow = v.bo.Follow }},
	{"write-delay-on", "write_delay_on", func(c *config.Config, v agentFlagValues) { c.WriteDelayOn = v.bo.WriteOn }},
	{"quick-ack", "quick_ack", func(c *config.Config, v agentFlagValues) { c.QuickAck = v.bo.QuickAck }},
	{"http", "http", func(c *config.Config, v agentFlagValues) { c.HTTP = v.http }},
}

// overrideConfig returns what puts the flags given on the command line
// (changed) over a config's keys, and the keys it replaces. The agent
// applies it to the config it starts with and to every config a reload
// (SIGHUP, the cluster's policy) brings, so an operator's --backend is
// never silently replaced by the file's backend, at start or later. bo
// v holds the flags' values as parsed; they are checked where a flag's
// would be (newBackend, the throttle registry).
func overrideConfig(changed func(string) bool, v agentFlagValues) (func(*config.Config), []string) {
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
				f.set(c, v)
			}
		}
	}, keys
}
