package control

// Onset response: feed-forward at the start of a write surge.
//
// The PID acts on the smoothed read wait, which is a lagging signal twice
// over: a read must first queue behind the new writes and complete, and
// the EWMA then needs a few samples to move. When twelve writers start at
// once the queue fills in the first 100 ms, the reader's next reads wait
// 40–80 ms, and the controller only reaches the delay that holds the
// threshold two or three samples later. The disturbance itself, though, is
// visible at once: the writers' bytes arrive at the target (TCP_INFO) and
// land on the resource's devices (diskstats) in the very first sample.
//
// So, in the manner of blk-iolatency, which scales a cgroup's queue depth
// from a latency window instead of waiting for an average to drift, the
// agent watches that leading signal and acts on it directly:
//
//   - OnsetDetector fires on the first sample of a surge: the writers'
//     aggregate rate rises above a floor after a quiet spell (armed by
//     QuietTicks samples below the floor), or, into a load that has run
//     for a second, more consumers write than a sample before and the
//     aggregate rate jumps by Factor over its recent average. The second
//     path counts writers, not bytes, so that the controller's own
//     release of a throttle (the same writers speeding up) is never taken
//     for a new load.
//   - Memory remembers the output that held the threshold while writers
//     were last active (an EWMA over loaded samples, from a second after
//     each onset on, so the surge's own transient is not learnt as the
//     level), per resource: a nightly backup or a bulk copy is the same
//     load each time it starts.
//   - On a firing the controller is preloaded with that output
//     (PID.Preload): the integral jumps to it, bumplessly, and the PID
//     takes over from there with its ordinary law. A short hold keeps the
//     release rule (integral halved below 75 % of the threshold) from
//     undoing the preload before the surge has reached the reader's wait;
//     after the hold, a preload that was too large is given back as fast
//     as any other over-throttle.
//
// With no memory yet (the first surge a resource sees) the detector only
// records the onset: a guess without a measurement could throttle a
// harmless load, and the PID reaches the right delay within a few samples
// anyway. Nothing here reads a clock or the kernel; the agent feeds one
// sample per interval.

// OnsetConfig parameterises OnsetDetector.
type OnsetConfig struct {
	// FloorBps is the aggregate write rate below which the resource is
	// quiet (the agent uses the throttleable-writer threshold).
	FloorBps float64
	// QuietTicks below the floor arm the detector.
	QuietTicks int
	// Factor is the jump over the recent average that counts as a surge
	// when more consumers join a running load.
	Factor float64
	// Alpha smooths the recent average.
	Alpha float64
}

// DefaultOnsetConfig arms after 300 ms of quiet at 100 ms sampling and
// counts new writers that double the write rate as a surge; the average
// follows over about a second.
func DefaultOnsetConfig(floorBps float64) OnsetConfig {
	return OnsetConfig{FloorBps: floorBps, QuietTicks: 3, Factor: 2, Alpha: 0.2}
}

// OnsetDetector finds the first sample of a write surge.
type OnsetDetector struct {
	cfg   OnsetConfig
	quiet int
	avg   float64
	seen  bool
	fired uint64
	since int // samples since the last firing
	loud  int // consecutive samples above the floor
	prevN int // writers in the last sample
}

// NewOnsetDetector returns a detector that is armed from the start: a
// resource the agent has just begun to watch is assumed quiet.
func NewOnsetDetector(cfg OnsetConfig) *OnsetDetector {
	return &OnsetDetector{cfg: cfg, quiet: cfg.QuietTicks, since: settleTicks}
}

// Update feeds one sample: the writers' aggregate rate (bytes/s) and how
// many consumers wrote above the floor; it reports whether the sample is
// the first of a surge.
func (o *OnsetDetector) Update(writeBps float64, writers int) bool {
	if !finite(writeBps) {
		return false
	}
	loud := writeBps >= o.cfg.FloorBps && writeBps > 0
	fire := false
	switch {
	case loud && o.quiet >= o.cfg.QuietTicks:
		fire = true
	case loud && o.loud >= settleTicks && o.since >= settleTicks && writers > o.prevN && writeBps >= o.cfg.Factor*o.avg:
		fire = true
	}
	if loud {
		o.quiet, o.loud = 0, o.loud+1
	} else {
		o.quiet, o.loud = o.quiet+1, 0
	}
	if !o.seen {
		o.avg, o.seen = writeBps, true
	} else {
		o.avg += o.cfg.Alpha * (writeBps - o.avg)
	}
	o.prevN = writers
	o.since++
	if fire {
		o.fired++
		o.since = 0
	}
	return fire
}

// Settled reports whether the last sample was loaded and at least
// settleTicks after the last firing: a sample whose output is the level
// the load needs, not the controller's way there.
func (o *OnsetDetector) Settled() bool { return o.Loaded() && o.fired > 0 && o.since >= settleTicks }

// settleTicks is a second at 100 ms sampling: the PID settles a surge in
// about half that in the lab.
const settleTicks = 10

// Loaded reports whether the last sample was above the floor.
func (o *OnsetDetector) Loaded() bool { return o.quiet == 0 }

// Fired is how many surges the detector has found.
func (o *OnsetDetector) Fired() uint64 { return o.fired }

// Memory is an EWMA of the controller's output over loaded samples: the
// level that held the threshold the last time writers were active.
type Memory struct {
	alpha float64
	level float64
	n     int
}

// NewMemory returns an empty memory; alpha weights each loaded sample.
func NewMemory(alpha float64) *Memory { return &Memory{alpha: alpha} }

// minMemorySamples is how many loaded samples the memory needs before it
// is trusted: one surge's transient alone is not a level.
const minMemorySamples = 10

// Observe records the output of a loaded sample.
func (m *Memory) Observe(out float64) {
	if !finite(out) {
		return
	}
	if m.n == 0 {
		m.level = out
	} else {
		m.level += m.alpha * (out - m.level)
	}
	m.n++
}

// Level returns the remembered output, and false until enough loaded
// samples have been seen.
func (m *Memory) Level() (float64, bool) {
	if m.n < minMemorySamples {
		return 0, false
	}
	return m.level, true
}
