package experiments

import (
	"cmp"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/lab/diskmodel"
	"github.com/sanqos/sanqos/report"
)

// consumerDevicesYAML maps each initiator to its own LUN's device.
func (r *runner) consumerDevicesYAML() string {
	var b strings.Builder
	b.WriteString("    consumer_devices:\n")
	for _, h := range lab.Hosts {
		fmt.Fprintf(&b, "      %s: [%s]\n", lab.HostAddr(h), r.LUN(h).Loop)
	}
	return b.String()
}

// agentConfig writes the agent's config for a controlled run. autonomic
// gives only the threshold; pid names the devices and the sets.
func (r *runner) agentConfig(path string, thr time.Duration, autonomic bool) error {
	return r.writeAgentConfig(path, "delayline", "127.0.0.1:9311", thr, autonomic)
}

func (r *runner) writeAgentConfig(path, backend, http string, thr time.Duration, autonomic bool) error {
	return r.writeAgentConfigOn(path, backend, http, thr, autonomic, lab.Target(0))
}

// writeAgentConfigOn is writeAgentConfig for the agent of target host t
// (autonomic discovery asks t's tgtd).
func (r *runner) writeAgentConfigOn(path, backend, http string, thr time.Duration, autonomic bool, t lab.TargetHost) error {
	var b strings.Builder
	// --agent-set may name the regulating agent's backend (delayline+htb
	// for the write-cap lever); the shadow stays dry-run.
	set, extra := splitBackend(r.opts.AgentYAML)
	if set != "" && backend != "dry-run" {
		backend = set
	}
	thrYAML := thr.String()
	if r.opts.ThresholdAuto {
		thrYAML = "auto"
	}
	fmt.Fprintf(&b, "backend: %s\nhttp: %s\nthreshold: %s\n%s\n", backend, http, thrYAML, extra)
	if v := r.scaledWriteMBs(); v > 0 && !strings.Contains(extra, "throttleable_write_mb_s:") {
		fmt.Fprintf(&b, "throttleable_write_mb_s: %g\n", v)
	}
	if autonomic {
		fmt.Fprintf(&b, "%sresources:\n  - name: %s\n", r.State.DiscoveryYAML(t), r.Res.Name)
		if r.opts.LUNMap {
			b.WriteString(r.consumerDevicesYAML())
		}
	} else {
		b.WriteString(r.staticResourceYAML())
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// staticResourceYAML is static discovery of the resource: its LUNs'
// devices and extra ones, b2 important, the other hosts throttleable.
func (r *runner) staticResourceYAML(extraDevs ...string) string {
	var devs, thr []string
	for _, l := range r.Res.LUNs {
		devs = append(devs, l.Loop)
		if l.Host != "b2" {
			thr = append(thr, lab.HostAddr(l.Host).String())
		}
	}
	return fmt.Sprintf("discovery:\n  source: static\nresources:\n  - name: %s\n    devices: [%s]\n    important: [%s]\n    throttleable: [%s]\n",
		r.Res.Name, strings.Join(append(devs, extraDevs...), ", "), lab.HostAddr("b2"), strings.Join(thr, ", "))
}

// scaledWriteMBs is the agent's throttleable_write_mb_s on a modelled
// disk slower or faster than the default: the default's 1 MB/s scaled by
// the bandwidth, so a writer counts as heavy at the same share of the
// disk (the stock-kernel guest's 4 MB/s group: 0.1 MB/s; with the default
// 1 MB/s none of three writers there, ~0.5 MB/s each, was ever slowed).
// 0 where the agent's default applies (default bandwidth, real disk).
func (r *runner) scaledWriteMBs() float64 {
	if r.State == nil || r.State.Options.RealDisk {
		return 0
	}
	bw, def := r.State.Options.Model.Bandwidth, diskmodel.DefaultParams().Bandwidth
	if bw <= 0 || bw == def {
		return 0
	}
	return report.Round(config.Defaults().WriteMBs*bw/def, 3)
}

// regulatingBackend is the backend the regulated runs' agent uses: the
// delay line unless --agent-set names another.
func (r *runner) regulatingBackend() string {
	set, _ := splitBackend(r.opts.AgentYAML)
	return cmp.Or(set, "delayline")
}

// withBackend is agent YAML with its backend line replaced by backend's.
func withBackend(agentYAML, backend string) string {
	_, rest := splitBackend(agentYAML)
	return strings.TrimSpace(strings.TrimSpace(rest) + "\nbackend: " + backend)
}

// splitBackend splits agent YAML into the backend its backend lines name
// (the last; "" for none) and its other lines.
func splitBackend(agentYAML string) (backend, rest string) {
	var kept []string
	for _, line := range strings.Split(agentYAML, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "backend:"); ok {
			backend = strings.TrimSpace(v)
			continue
		}
		kept = append(kept, line)
	}
	return backend, strings.Join(kept, "\n")
}
