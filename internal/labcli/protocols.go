package labcli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/lab/experiments"
)

// protocolLabs are `lab run --protocol`'s protocols and the lab each runs
// on: iSCSI and NVMe/TCP both served by the kernel (LIO, nvmet) to the
// kernel's initiators, so the two differ only in the protocol.
var protocolLabs = map[string]struct{ target, initiator string }{
	"iscsi":    {lab.TargetLIO, lab.InitiatorKernel},
	"nvme-tcp": {lab.TargetNVMet, lab.InitiatorKernel},
}

// protocolRow is one regulated run of one protocol, the figures issue 54
// judges by, beside the other protocol's.
type protocolRow struct {
	Protocol    string  `json:"protocol"`
	ThresholdMs float64 `json:"threshold_ms"`
	P95X        float64 `json:"p95_x_threshold"`
	// KeptVsOracle is the interferers' writes (or, where they read,
	// reads plus writes) kept against the oracle's (0: no oracle ran).
	KeptVsOracle    float64 `json:"kept_vs_oracle"`
	Retrans         uint64  `json:"retrans_segs"`
	BaselineRetrans uint64  `json:"baseline_retrans_segs"`
}

// protocolsSummary is the summary.json of a `--protocol` invocation:
// each protocol's run is a directory of its own beside it.
type protocolsSummary struct {
	Experiment string        `json:"experiment"`
	Protocols  []string      `json:"protocols"`
	Runs       []string      `json:"runs"`
	SideBySide []protocolRow `json:"side_by_side"`
}

// runProtocols runs experiment name once per protocol in this lab (in
// the stock-kernel guest), rebuilding the lab on the protocol's target
// with its other options as they are, into results/name/RUN/PROTOCOL, and
// writes results/name/RUN/summary.json setting the runs side by side.
// An I/O error fails a run (fio's), so a summary means none.
func runProtocols(ctx context.Context, name string, o experiments.Options, protocols []string, log io.Writer) (string, error) {
	for _, p := range protocols {
		if _, ok := protocolLabs[p]; !ok {
			return "", fmt.Errorf("--protocol %q: want iscsi or nvme-tcp", p)
		}
	}
	s, err := lab.LoadState()
	if err != nil {
		return "", fmt.Errorf("lab is not up (run `sanqos-lab lab up --kernel debian`): %w", err)
	}
	if o.RunID == "" {
		o.RunID = time.Now().UTC().Format("20060102-150405")
	}
	top := filepath.Join(o.Results, name, o.RunID)
	sum := protocolsSummary{Experiment: name, Protocols: protocols}
	opts := s.Options
	for _, p := range protocols {
		opts.Target, opts.Initiator = protocolLabs[p].target, protocolLabs[p].initiator
		fmt.Fprintf(log, "%s over %s: lab up --target %s --initiator %s\n", name, p, opts.Target, opts.Initiator)
		if _, err := lab.Up(opts, log); err != nil {
			return top, fmt.Errorf("%s: %w", p, err)
		}
		po := o
		po.RunID = filepath.Join(o.RunID, p)
		dir, err := experiments.RunExperiment(ctx, name, po)
		if err != nil {
			return top, fmt.Errorf("%s: %w", p, err)
		}
		rows, err := protocolRows(p, filepath.Join(dir, "summary.json"))
		if err != nil {
			return top, err
		}
		sum.Runs = append(sum.Runs, p+"/summary.json")
		sum.SideBySide = append(sum.SideBySide, rows...)
	}
	return top, lab.WriteJSON(filepath.Join(top, "summary.json"), sum)
}

// protocolRows reads a controlled experiment's summary.json into rows
// (none for an experiment without regulated runs, interference's).
func protocolRows(protocol, path string) ([]protocolRow, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s struct {
		Regulated []struct {
			ThresholdMs float64 `json:"threshold_ms"`
			Criteria    *struct {
				P95X            float64 `json:"p95_x_threshold"`
				Writes          float64 `json:"write_kept_vs_oracle"`
				Moved           float64 `json:"moved_kept_vs_oracle"`
				Retrans         uint64  `json:"retrans_segs"`
				BaselineRetrans uint64  `json:"baseline_retrans_segs"`
			} `json:"criteria"`
		} `json:"regulated"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var rows []protocolRow
	for _, r := range s.Regulated {
		if c := r.Criteria; c != nil {
			kept := c.Writes
			if c.Moved > 0 {
				kept = c.Moved
			}
			rows = append(rows, protocolRow{Protocol: protocol, ThresholdMs: r.ThresholdMs, P95X: c.P95X, KeptVsOracle: kept, Retrans: c.Retrans, BaselineRetrans: c.BaselineRetrans})
		}
	}
	return rows, nil
}
