package agent

import (
	"github.com/sanqos/sanqos/throttle"
)

// readOverWrite is the thesis' policy (and the default): when the
// resource's read wait exceeds its threshold, every consumer writing more
// than throttleable_write_mb_s, and every static throttleable one, gets the
// controller's write delay; important consumers never do.
type readOverWrite struct{ importantOnly bool }

// ReadOverWrite returns the default policy.
func ReadOverWrite() Policy { return readOverWrite{} }

func (p readOverWrite) Name() string {
	if p.importantOnly {
		return "important-sets"
	}
	return "read-over-write"
}
func (p readOverWrite) IndicatorOfImportantOnly() bool { return p.importantOnly }

func (p readOverWrite) Decide(in *PolicyInput) PolicyOutput {
	out := PolicyOutput{Throttleable: in.throttleable()}
	if in.Output > 0 {
		out.Settings = in.settings()
	}
	for k, c := range in.Consumers {
		if c.Important || !(c.Static || c.WriteEWMA > in.WriteBps) {
			continue
		}
		out.Throttleable = append(out.Throttleable, k)
		if in.Output > 0 {
			out.Settings[c.Addr] = throttle.Setting{WriteDelay: in.Output}
		}
	}
	return out
}
