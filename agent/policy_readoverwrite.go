package agent

// readOverWrite is the thesis' policy, made direction-blind (and the
// default): when the resource's read wait exceeds its threshold, every
// consumer that saturates it (saturation.go: several requests queued, or
// reading more than throttleable_read_mb_s), every consumer writing more
// than throttleable_write_mb_s (the thesis' rule) and every static
// throttleable one gets the controller's delay, split over the
// directions it loads the resource in: a backup's reads are delayed, a
// writer's writes, a VM's both. Important consumers never are.
type readOverWrite struct {
	importantOnly bool
	bulk          bulkSet
}

// ReadOverWrite returns the default policy.
func ReadOverWrite() Policy { return &readOverWrite{} }

func (p *readOverWrite) Name() string {
	if p.importantOnly {
		return "important-sets"
	}
	return "read-over-write"
}

// Indicator: important-sets protects the named consumers' reads; the
// default protects the reads of everyone it does not slow, so a backup's
// own waits are not what it holds under the threshold.
func (p *readOverWrite) Indicator() IndicatorScope {
	if p.importantOnly {
		return IndicatorImportant
	}
	return IndicatorUnthrottled
}

func (p *readOverWrite) Decide(in *PolicyInput) PolicyOutput {
	out := PolicyOutput{Throttleable: in.throttleable()}
	if in.Output > 0 {
		out.Settings = in.settings()
	}
	p.bulk.tick(in)
	for k := range in.Consumers {
		c := &in.Consumers[k]
		if !p.bulk.member(k, c, in) {
			continue
		}
		out.Throttleable = append(out.Throttleable, k)
		if in.Output > 0 {
			out.Settings[k] = directed(*c, in.Output, in)
		}
	}
	return out
}
