package experiments

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
	"github.com/sanqos/sanqos/throttle"
)

// throttleEffect: Fixed write delays on the writers lower the reader's wait (thesis Fig 5.8).
func init() {
	register(&Experiment{Name: "throttle-effect", DefaultScale: 0.25, Flags: []*Flag{flagWriters, flagBackends},
		Title: "Fixed 4.6 ms and 9.6 ms write delays on 12 writers lower the reader's wait (Fig 5.8)", Run: func(r *runner) (any, error) { return r.eachBackend("throttle-effect", r.throttleEffect) }})
}

// EffectWindow is one throttle window of throttle-effect.
type EffectWindow struct {
	Name       string      `json:"name"`
	DelayMs    float64     `json:"write_delay_ms"`
	FromS      float64     `json:"from_s"`
	ToS        float64     `json:"to_s"`
	ReadWaitMs report.Dist `json:"read_wait_ms"`
	WriteMBs   float64     `json:"write_mb_s"`
}

// EffectSummary is summary.json of throttle-effect.
type EffectSummary struct {
	Experiment string `json:"experiment"`
	backendFields
	Writers int            `json:"writers"`
	Windows []EffectWindow `json:"windows"`
	runTCP
}

func (r *runner) throttleEffect(backend string) (backendRun, error) {
	a, err := r.startAgent(backend, thesisWrites...)
	if err != nil {
		return nil, err
	}
	defer a.Stop()
	sc := r.Scale
	length := sc(420 * time.Second)
	nw := r.controlledWriters()
	writers := r.writers(nw, 0, length)
	var addrs []netip.Addr
	for _, j := range writers {
		addrs = append(addrs, lab.HostAddr(j.Host))
	}
	delay := func(d time.Duration) func() error {
		return func() error { return setAll(a, addrs, throttle.Setting{WriteDelay: d}) }
	}
	wins := []EffectWindow{
		{Name: "unthrottled", FromS: sc(10 * time.Second).Seconds(), ToS: sc(100 * time.Second).Seconds()},
		{Name: "4.6 ms", DelayMs: 4.6, FromS: sc(100 * time.Second).Seconds(), ToS: sc(190 * time.Second).Seconds()},
		{Name: "unthrottled again", FromS: sc(190 * time.Second).Seconds(), ToS: sc(280 * time.Second).Seconds()},
		{Name: "9.6 ms", DelayMs: 9.6, FromS: sc(280 * time.Second).Seconds(), ToS: sc(370 * time.Second).Seconds()},
	}
	p := &lab.Phase{Name: "effect", Label: fmt.Sprintf("%d writers, timed write delays", nw), Length: length, From: 0, To: length,
		Jobs: append([]lab.Job{r.reader(length)}, writers...),
		Events: []lab.Event{
			{At: sc(100 * time.Second), Name: "4.6ms", Do: delay(4600 * time.Microsecond)},
			{At: sc(190 * time.Second), Name: "release", Do: delay(0)},
			{At: sc(280 * time.Second), Name: "9.6ms", Do: delay(9600 * time.Microsecond)},
			{At: sc(370 * time.Second), Name: "release", Do: delay(0)},
		}}
	rs, err := r.RunAll([]*lab.Phase{p})
	if err != nil {
		return nil, err
	}
	res := rs[0]
	sum := &EffectSummary{Experiment: "throttle-effect", Writers: nw, runTCP: tcpOf(rs)}
	for _, w := range wins {
		// Skip the first second of a window: the throttle's step is
		// instantaneous, the queue's drain is not.
		ticks := res.Between(time.Duration(w.FromS*1e9)+time.Second, time.Duration(w.ToS*1e9))
		w.ReadWaitMs = report.RoundDist(report.Describe(report.Values(ticks, "b2", readWait)))
		w.WriteMBs = report.Round(report.Aggregate(ticks, lab.Hosts[1:], writeMBs), 2)
		sum.Windows = append(sum.Windows, w)
	}
	x, y := res.Series("b2", readWait)
	err = report.TimePlot(filepath.Join(r.Dir, "read-wait.png"), fmt.Sprintf("smalljob's wait with %d writers throttled at 4.6 ms, then 9.6 ms by %s (Fig 5.8)", nw, backend),
		"time (s)", "read wait (ms, EWMA 0.15)", []report.Series{{Name: "b2 read wait", X: x, Y: report.Smooth(y)}}, nil)
	return sum, err
}
