package experiments

import (
	"fmt"
	"math"
	"strconv"
	"syscall"
	"time"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
)

// The reliability experiment's faults at the agent's limits: the clock
// jumping, counters wrapping, the delay line at its maximum delay and at
// its queue limit.

// faultClockJump steps the wall clock an hour forward and back again
// under load. The agent measures intervals on the monotonic clock, so
// neither step may show up as a bogus interval.
func faultClockJump(r *runner) Fault {
	f := Fault{Name: "wall clock steps +1 h, then back", Expect: "no bogus interval: the indicator stays finite and regulation continues", Data: "n/a"}
	a, err := r.startAutonomic("clock")
	if err != nil {
		return failed(f, err)
	}
	defer a.Stop()
	w0 := a.Warnings()
	p := r.controlledLoad("clock-jump", "clock +1 h at 3 s, -1 h at 6 s", 10*time.Second, lab.Hosts[1:], 4)
	var stepped time.Duration // net wall-clock offset we applied
	step := func(d time.Duration) func() error {
		return func() error {
			tv := syscall.NsecToTimeval(time.Now().Add(d).UnixNano())
			if err := syscall.Settimeofday(&tv); err != nil {
				return err
			}
			stepped += d
			return nil
		}
	}
	p.Events = []lab.Event{
		{At: 3 * time.Second, Name: "clock +1h", Do: step(time.Hour)},
		{At: 6 * time.Second, Name: "clock -1h", Do: step(-time.Hour)}}
	seen, err := f.runSampled(r, a, p)
	if stepped != 0 {
		step(-stepped)() // never leave the machine's clock off
	}
	if err != nil {
		return failed(f, err)
	}
	var st struct {
		Resources []struct {
			IndicatorMs float64 `json:"indicator_ms"`
		} `json:"resources"`
	}
	if err := a.Status(&st); err != nil {
		return failed(f, err)
	}
	after := seen.count(6500*time.Millisecond, nil)
	ind := math.NaN()
	if len(st.Resources) > 0 {
		ind = st.Resources[0].IndicatorMs
	}
	f.LogLines = a.Warnings() - w0
	f.Result = fmt.Sprintf("indicator after both steps %.1f ms; throttling in %d samples after the step back", ind, after)
	f.Pass = a.Alive() && !math.IsNaN(ind) && !math.IsInf(ind, 0) && ind < 1000 && after > 0 && f.LogLines == 0
	return f
}

// faultCounterWrap feeds the sampler a real diskstats line whose 32-bit
// tick counters wrap between two samples. The kernel takes 49.7 days to do
// that, so this row is computed in-process from captured counters.
func faultCounterWrap(r *runner) Fault {
	f := Fault{Name: "diskstats counters wrap (32-bit ticks)", Expect: "the interval across the wrap equals the one without", Data: "n/a"}
	ds, err := sample.NewDiskstats("/proc", "/sys")
	if err != nil {
		return failed(f, err)
	}
	lun := r.LUN("b2").Loop
	c0, err := ds.Read(lun)
	if err != nil {
		return failed(f, err)
	}
	prev := c0[lun]
	cur := prev
	cur.Time = prev.Time.Add(100 * time.Millisecond)
	cur.Reads += 10
	cur.ReadTicks += 65
	cur.ReadSectors += 160
	want, err := sample.Diff(prev, cur)
	if err != nil {
		return failed(f, err)
	}
	// Same interval, with the tick counter 30 ms short of its wrap.
	const lim = 1 << 32
	prev.ReadTicks = lim - 30
	cur.ReadTicks = (prev.ReadTicks + 65) % lim
	got, err := sample.Diff(prev, cur)
	if err != nil {
		return failed(f, err)
	}
	f.Result = fmt.Sprintf("read wait %.2f ms across the wrap, %.2f ms without", got.ReadWaitMs, want.ReadWaitMs)
	f.Pass = got.ReadWaitMs == want.ReadWaitMs && got.Reads == want.Reads
	return f
}

// faultMaxDelay runs the heaviest load with every writer at the largest
// delay a throttle accepts, both directions.
func faultMaxDelay(r *runner) Fault {
	d := throttle.MaxDelay - time.Millisecond
	f := Fault{Name: fmt.Sprintf("delay line at maximum delay (%v both ways, 12 writers)", d), Expect: "no retransmission timeout and no retransmission beyond tail-loss probes", Data: "n/a"}
	held, err := f.delayLineAt(r, d, "max-delay", "99 ms on every writer")
	if err != nil {
		return failed(f, err)
	}
	f.Result = fmt.Sprintf("%d packets delayed; %d retransmissions not from probes, %d timeouts", held.Packets, f.TCP.NonProbe(), f.TCP.Timeouts)
	f.Pass = held.Packets > 0 && f.TCP.NonProbe() == 0 && f.TCP.Timeouts == 0
	return f
}

// faultQueueLimit shrinks the delay line's queue until the load overruns
// it: packets must leave early, in order, not be dropped.
func faultQueueLimit(r *runner) Fault {
	const limit = 8
	f := Fault{Name: fmt.Sprintf("delay line queue full (limit %d packets, 20 ms, 12 writers)", limit), Expect: "limit reached; soonest-due packets leave early, in order; no timeout. Beyond the limit ACKs arrive with uneven delays, which RACK may read as loss: a few fast retransmits are the documented price", Data: "n/a"}
	held, err := f.delayLineAt(r, 20*time.Millisecond, "queue-limit", "queue limit 8", "--queue-limit", strconv.Itoa(limit))
	if err != nil {
		return failed(f, err)
	}
	f.Result = fmt.Sprintf("%d packets held, %d released early at the limit; %d retransmissions not from probes, %d timeouts", held.Packets, held.PassedAtLimit, f.TCP.NonProbe(), f.TCP.Timeouts)
	f.Pass = held.PassedAtLimit > 0 && f.TCP.Timeouts == 0
	return f
}

// delayLineAt runs the controlled load for 8 s with every writer delayed
// by d both ways, on a delay-line agent started with args, and returns
// what the delay line held, summed over its consumers.
func (f *Fault) delayLineAt(r *runner, d time.Duration, name, label string, args ...string) (throttle.DelayCounters, error) {
	var held throttle.DelayCounters
	a, err := lab.StartAgent("delayline", r.Dir, args...)
	if err != nil {
		return held, err
	}
	defer a.Stop()
	if err := setAll(a, interfererAddrs(), throttle.Setting{ReadDelay: d, WriteDelay: d}); err != nil {
		return held, err
	}
	if _, err = f.run(r, r.controlledLoad(name, label, 8*time.Second, lab.Hosts[1:], 4)); err != nil {
		return held, err
	}
	c, err := a.Counters()
	for _, v := range c {
		held.Packets += v.Packets
		held.PassedAtLimit += v.PassedAtLimit
	}
	return held, err
}
