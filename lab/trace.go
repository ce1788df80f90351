package lab

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"github.com/sanqos/sanqos/sample"
)

// LoadTrace reads a run's trace.csv back into phase results, matching rows
// to phases by name, so summaries and plots can be recomputed from any
// recorded run (TCP counters are not in the trace and stay zero).
func LoadTrace(path string, phases []*Phase) ([]*PhaseResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rd := csv.NewReader(f)
	col, err := traceColumns(rd, path)
	if err != nil {
		return nil, err
	}
	byName := map[string]*Phase{}
	for _, p := range phases {
		byName[p.Name] = p
	}
	type key struct {
		phase string
		rep   int
	}
	results := map[key]*PhaseResult{}
	var order []key
	for line := 2; ; line++ {
		rec, err := rd.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		p := byName[rec[col["phase"]]]
		if p == nil {
			continue
		}
		rep, err := strconv.Atoi(rec[col["repeat"]])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: repeat %q", path, line, rec[col["repeat"]])
		}
		k := key{p.Name, rep}
		res := results[k]
		if res == nil {
			res = &PhaseResult{Phase: p, Repeat: rep}
			results[k] = res
			order = append(order, k)
		}
		t := traceNum(rec[col["t_s"]])
		if n := len(res.Ticks); n == 0 || res.Ticks[n-1].T != t {
			res.Ticks = append(res.Ticks, Tick{T: t, Dev: map[string]sample.Interval{}})
		}
		res.Ticks[len(res.Ticks)-1].Dev[rec[col["host"]]] = traceInterval(rec, col)
	}
	out := make([]*PhaseResult, 0, len(order))
	for _, k := range order {
		out = append(out, results[k])
	}
	return out, nil
}

// traceColumns reads the trace's header from rd and returns each column's
// index, checking that every column LoadTrace reads is there.
func traceColumns(rd *csv.Reader, path string) (map[string]int, error) {
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
			return nil, fmt.Errorf("%s: no %q column", path, need)
		}
	}
	return col, nil
}

// traceInterval is the device interval of trace row rec (columns col).
func traceInterval(rec []string, col map[string]int) sample.Interval {
	reads, _ := strconv.ParseUint(rec[col["reads"]], 10, 64)
	writes, _ := strconv.ParseUint(rec[col["writes"]], 10, 64)
	return sample.Interval{
		Device: rec[col["device"]], Reads: reads, Writes: writes,
		ReadWaitMs: traceNum(rec[col["r_await_ms"]]), WriteWaitMs: traceNum(rec[col["w_await_ms"]]),
		ReadBps: traceNum(rec[col["read_mb_s"]]) * 1e6, WriteBps: traceNum(rec[col["write_mb_s"]]) * 1e6,
	}
}

// traceNum is a trace cell's number; empty (ff's NaN) or unreadable cells
// are NaN.
func traceNum(s string) float64 {
	if s == "" {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return math.NaN()
	}
	return v
}
