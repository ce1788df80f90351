package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/sanqos/sanqos/sample"
)

// Tick is one sampling interval of a run, per host: what a lab phase
// records from diskstats and what the simulator synthesises, so that one
// set of helpers summarises both.
type Tick struct {
	T   float64                    // seconds since the phase started, at the interval's end
	Dev map[string]sample.Interval // by host
}

func (t Tick) tick() Tick { return t }

// Ticker is a Tick, or a struct embedding one (the simulator's tick also
// carries the delay it applied).
type Ticker interface{ tick() Tick }

// Values returns f of host's interval in each tick; a tick without one
// (the device was being re-baselined) is skipped, never counted as zero.
func Values[T Ticker](ticks []T, host string, f func(sample.Interval) float64) []float64 {
	var v []float64
	for _, t := range ticks {
		if iv, ok := t.tick().Dev[host]; ok {
			v = append(v, f(iv))
		}
	}
	return v
}

// HostSeries is f of host's interval in each tick that has one, against time.
func HostSeries[T Ticker](ticks []T, host string, f func(sample.Interval) float64) (x, y []float64) {
	for _, t := range ticks {
		if iv, ok := t.tick().Dev[host]; ok {
			x, y = append(x, t.tick().T), append(y, f(iv))
		}
	}
	return x, y
}

// Between are the ticks whose interval ended in (from, to] after their
// phase started (a nanosecond's slack for the times' rounding).
func Between[T Ticker](ticks []T, from, to time.Duration) []T {
	var w []T
	for _, t := range ticks {
		if s := t.tick().T; s > from.Seconds()+1e-9 && s <= to.Seconds()+1e-9 {
			w = append(w, t)
		}
	}
	return w
}

// Aggregate averages, over ticks, the sum of f across hosts (an aggregate
// rate); NaN without ticks.
func Aggregate[T Ticker](ticks []T, hosts []string, f func(sample.Interval) float64) float64 {
	if len(ticks) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, t := range ticks {
		sum += hostSum(t.tick(), hosts, f)
	}
	return sum / float64(len(ticks))
}

// AggregateSeries is the sum of f across hosts in each tick, against time.
func AggregateSeries[T Ticker](ticks []T, hosts []string, f func(sample.Interval) float64) (x, y []float64) {
	for _, t := range ticks {
		x = append(x, t.tick().T)
		y = append(y, hostSum(t.tick(), hosts, f))
	}
	return x, y
}

func hostSum(t Tick, hosts []string, f func(sample.Interval) float64) float64 {
	var s float64
	for _, h := range hosts {
		if iv, ok := t.Dev[h]; ok {
			s += f(iv)
		}
	}
	return s
}

// TraceRun is one phase and repeat of a trace.csv, its ticks in the
// file's order.
type TraceRun struct {
	Phase  string
	Repeat int
	Ticks  []Tick
}

// ReadTrace reads a trace.csv (a lab run's or the simulator's) into the
// runs keep accepts (nil: all), in the order they first appear. A cell
// that is empty (a NaN) or unreadable is NaN.
func ReadTrace(path string, keep func(phase string, repeat int) bool) ([]*TraceRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rd := csv.NewReader(f)
	head, err := rd.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	for _, need := range []string{"phase", "repeat", "t_s", "host", "device", "reads", "writes", "r_await_ms", "w_await_ms", "read_mb_s", "write_mb_s"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("%s: no %q column (not a lab trace)", path, need)
		}
	}
	num := func(rec []string, c string) float64 {
		v, err := strconv.ParseFloat(rec[col[c]], 64)
		if err != nil {
			return math.NaN()
		}
		return v
	}
	type key struct {
		phase  string
		repeat int
	}
	runs := map[key]*TraceRun{}
	var out []*TraceRun
	for line := 2; ; line++ {
		rec, err := rd.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		rep, err := strconv.Atoi(rec[col["repeat"]])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: repeat %q", path, line, rec[col["repeat"]])
		}
		k := key{rec[col["phase"]], rep}
		run := runs[k]
		if run == nil {
			if keep != nil && !keep(k.phase, k.repeat) {
				continue
			}
			run = &TraceRun{Phase: k.phase, Repeat: rep}
			runs[k] = run
			out = append(out, run)
		}
		if t := num(rec, "t_s"); len(run.Ticks) == 0 || run.Ticks[len(run.Ticks)-1].T != t {
			run.Ticks = append(run.Ticks, Tick{T: t, Dev: map[string]sample.Interval{}})
		}
		reads, _ := strconv.ParseUint(rec[col["reads"]], 10, 64)
		writes, _ := strconv.ParseUint(rec[col["writes"]], 10, 64)
		// inflight came later (the queue rule counts it): older traces
		// have none and read as zero.
		var inFlight uint64
		if c, ok := col["inflight"]; ok {
			inFlight, _ = strconv.ParseUint(rec[c], 10, 64)
		}
		run.Ticks[len(run.Ticks)-1].Dev[rec[col["host"]]] = sample.Interval{
			Device: rec[col["device"]], Reads: reads, Writes: writes,
			ReadWaitMs: num(rec, "r_await_ms"), WriteWaitMs: num(rec, "w_await_ms"),
			ReadBps: num(rec, "read_mb_s") * 1e6, WriteBps: num(rec, "write_mb_s") * 1e6, InFlight: inFlight,
		}
	}
}
