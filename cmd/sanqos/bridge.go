package main

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/capture"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/passive"
)

// bridgeInputs are bridge mode's sampler and discoverer: a capture on the
// configured interface feeding a passive.Meter. Close stops the capture.
type bridgeInputs struct {
	meter *passive.Meter
	cap   *capture.Capture
	ran   chan error
}

func bridgeResources(cfg *config.Config) ([]passive.Resource, error) {
	var rs []passive.Resource
	for _, r := range cfg.Resources {
		pr := passive.Resource{Name: r.Name, Protocol: r.Protocol}
		for _, p := range r.Portals {
			ap, err := passive.ParsePortal(p, cfg.PortalPort(r))
			if err != nil {
				return nil, fmt.Errorf("resource %s: %w", r.Name, err)
			}
			pr.Portals = append(pr.Portals, ap)
		}
		rs = append(rs, pr)
	}
	return rs, nil
}

func startBridge(cfg *config.Config, log *slog.Logger) (*bridgeInputs, error) {
	rs, err := bridgeResources(cfg)
	if err != nil {
		return nil, err
	}
	m, err := passive.NewMeter(rs)
	if err != nil {
		return nil, err
	}
	// Every portal's port: iSCSI's and NVMe/TCP's resources side by side.
	cp, err := capture.Open(cfg.CaptureInterface, passive.Ports(rs)...)
	if err != nil {
		return nil, err
	}
	b := &bridgeInputs{meter: m, cap: cp, ran: make(chan error, 1)}
	go func() {
		err := cp.Run(m.Segment)
		if err != nil {
			// Without the capture the indicator goes silent: no reads
			// means no data, and the controller holds (fails open).
			log.Error("capture stopped; the passive signal is gone", "err", err)
		}
		b.ran <- err
	}()
	log.Info("bridge mode: capturing", "interface", cfg.CaptureInterface, "ports", passive.Ports(rs), "resources", len(rs))
	return b, nil
}

// Close stops the capture and logs what it saw.
func (b *bridgeInputs) Close(log *slog.Logger) {
	st := b.cap.Stats()
	b.cap.Close()
	pc, gaps := b.meter.Counters()
	log.Info("bridge capture closed", "segments", st.Packets, "truncated", st.Truncated, "kernel_drops", st.Drops,
		"commands", pc.Commands, "completed", pc.Completed, "unmatched", pc.Unmatched, "expired", pc.Expired, "resync_bytes", pc.Resyncs, "gaps", gaps)
}

// Discover is the topology the wire shows: per resource, every initiator
// seen talking to its portals, with its pseudo-device.
func (b *bridgeInputs) Discover() (*agent.Topology, error) {
	t := &agent.Topology{Resources: map[string]agent.ResourceView{}}
	for name, cons := range b.meter.Consumers() {
		v := agent.ResourceView{Consumers: map[netip.Addr][]string{}}
		for a, dev := range cons {
			v.Devices = append(v.Devices, dev)
			v.Consumers[a] = []string{dev}
		}
		sort.Strings(v.Devices)
		t.Resources[name] = v
	}
	return t, nil
}

// samePortals reports whether a reload keeps every resource's portals
// and protocol (the capture and meter are built from them at start).
func samePortals(a, b *config.Config) bool {
	if len(a.Resources) != len(b.Resources) || a.CaptureInterface != b.CaptureInterface {
		return false
	}
	for i := range a.Resources {
		ra, rb := a.Resources[i], b.Resources[i]
		if ra.Name != rb.Name || ra.Protocol != rb.Protocol || !slices.Equal(ra.Portals, rb.Portals) {
			return false
		}
	}
	return true
}
