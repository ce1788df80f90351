package agent

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sanqos/sanqos/config"
)

// ErrNoResources refuses a reload that would leave nothing protected.
var ErrNoResources = errors.New("the new config lists no resources: it would leave nothing protected")

// Reload swaps in a new config whole, or refuses it whole and the old
// one stays active. Refused: a config with no resources; one that
// changes a setting the agent takes once at start (config.RestartKeys:
// backend, interval, listeners, interfaces, the loops' timing), with the
// keys; and, with Deps.NewDiscoverer, one whose discovery cannot be
// built or cannot read the target. Accepted, its resources, devices and
// discovery settings take effect together: the new discoverer runs one
// round before the swap, so a resource it adds is mapped (or named
// unmapped, with why) from the next tick on, and the discovery loop
// restarts its timing on the new settings. A resource it removes
// releases whom it slowed, each with an event.
func (a *Agent) Reload(cfg *config.Config) error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	if len(cfg.Resources) == 0 {
		return fmt.Errorf("%w (the running config stays)", ErrNoResources)
	}
	a.mu.Lock()
	old, disc := a.cfg, a.deps.Discoverer
	a.mu.Unlock()
	if keys := config.RestartChanges(old, cfg); len(keys) > 0 {
		return fmt.Errorf("needs a restart: %s changed (the running config stays)", strings.Join(keys, ", "))
	}
	var topo *Topology
	if a.deps.NewDiscoverer != nil && disc != nil {
		nd, err := a.deps.NewDiscoverer(cfg)
		if err != nil {
			return fmt.Errorf("discovery: %w (the running config stays)", err)
		}
		// Outside a.mu: tgtadm may take seconds, and status must answer
		// meanwhile.
		if topo, err = nd.Discover(); err != nil {
			return fmt.Errorf("discovery with the new config fails: %w (the running config stays)", err)
		}
		disc = nd
	}
	kept, removed := resourceNames(cfg), []string{}
	for _, r := range old.Resources {
		if !slices.Contains(kept, r.Name) {
			removed = append(removed, r.Name)
		}
	}
	a.loops.events.revive(kept)
	a.mu.Lock()
	a.cfg = cfg
	if topo != nil {
		a.deps.Discoverer = disc
		a.discGen++
		a.noteTopology(topo)
	}
	a.loops.swap(a.specs(cfg), topo) // one generation: the next tick runs all of it
	a.mu.Unlock()
	a.loops.releaseEvents(removed, releaseRemoved, time.Now())
	select {
	case a.reloaded <- struct{}{}:
	default: // the loop has one pending already
	}
	return nil
}

func resourceNames(cfg *config.Config) []string {
	out := make([]string, len(cfg.Resources))
	for i, r := range cfg.Resources {
		out[i] = r.Name
	}
	return out
}

// Unmapped is, by resource, why the last discovery round could not map
// it (nil: every resource mapped, or no round yet).
func (a *Agent) Unmapped() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lastTopo == nil {
		return nil
	}
	return maps.Clone(a.lastTopo.Unmapped)
}

// reloadMetrics are the outcome of the last reload, named as Prometheus
// names its own (prometheus_config_last_reload_*), so alert rules read
// alike: successful is 1 at start and after an applied reload, 0 after a
// refused one; the timestamp is that of the start or the last applied
// reload.
type reloadMetrics struct {
	ok, at prometheus.Gauge
}

func newReloadMetrics(start time.Time) reloadMetrics {
	m := reloadMetrics{
		ok: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sanqos_config_last_reload_successful",
			Help: "1 if the last config reload was applied (or none was asked since start), 0 if it was refused: the agent runs an older config than the file's."}),
		at: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sanqos_config_last_reload_success_timestamp_seconds",
			Help: "When the running config was loaded: the agent's start or its last applied reload (Unix time)."}),
	}
	m.ok.Set(1)
	m.at.Set(float64(start.UnixNano()) / 1e9)
	return m
}

// RecordReload counts a reload's outcome in the metrics: err is why it
// was refused (the file did not load, the agent refused it), nil when it
// was applied.
func (a *Agent) RecordReload(err error) {
	if err != nil {
		a.reloads.ok.Set(0)
		return
	}
	a.reloads.ok.Set(1)
	a.reloads.at.Set(float64(time.Now().UnixNano()) / 1e9)
}
