package lab

// The TCP counters of every namespace of a phase, second by second: a
// phase's totals say how many loss probes each side sent, the series
// says when, so each can be matched to the machine's stalls.

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/sanqos/sanqos/report"
)

// TCPSample is one namespace's cumulative TCP counters, read T after its
// phase started.
type TCPSample struct {
	T time.Duration
	C TCPCounters
}

// tcpWatch reads the counters of each namespace a phase's processes run
// in at every whole second, from /proc/PID/net of one process there: no
// process is started, which `ip netns exec cat` would need six times a
// second.
type tcpWatch struct {
	pids   map[string]int // namespace → a process in it
	next   time.Duration
	series map[string][]TCPSample
}

// newTCPWatch watches the namespaces of the started fio commands (`ip
// netns exec NS fio`: ip enters NS and execs fio under its own pid) and
// the first target's, through its tgtd.
func newTCPWatch(cmds []*exec.Cmd) *tcpWatch {
	w := &tcpWatch{pids: map[string]int{}, next: time.Second, series: map[string][]TCPSample{}}
	for _, c := range cmds {
		if c.Process != nil && len(c.Args) > 3 {
			w.pids[c.Args[3]] = c.Process.Pid
		}
	}
	if pid := TargetPid(); pid > 0 {
		w.pids[Target(0).NS] = pid
	}
	return w
}

// sample reads every namespace once at has passed the next whole second.
// A failed read (the process has exited) leaves that second out of the
// namespace's series rather than failing the run over its
// instrumentation: the gap shows in the times.
func (w *tcpWatch) sample(at time.Duration) {
	if at < w.next {
		return
	}
	for at >= w.next {
		w.next += time.Second
	}
	for ns, pid := range w.pids {
		if c, err := ReadTCPCountersOf(pid); err == nil {
			w.series[ns] = append(w.series[ns], TCPSample{T: at, C: c})
		}
	}
}

// writeCSV writes the series to path: when each sample was read (s after
// the phase started), the namespace, and its cumulative counters, one
// namespace after the other in name order.
func (w *tcpWatch) writeCSV(path string) error {
	if len(w.series) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("t_s,ns,retrans_segs,loss_probes,dsack_recv,rto_timeouts,host_queue_skips,fast_retrans,rcv_drops\n")
	for _, ns := range slices.Sorted(maps.Keys(w.series)) {
		for _, s := range w.series[ns] {
			c := s.C
			fmt.Fprintf(&b, "%.1f,%s,%d,%d,%d,%d,%d,%d,%d\n", s.T.Seconds(), ns, c.RetransSegs, c.LossProbes, c.DSACKRecv, c.Timeouts,
				c.HostQueueSkips, c.FastRetrans, c.RcvDrops)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// stallSlack widens each second's window when probes are matched to
// stalls: a sample is read up to one 100 ms tick after its whole second,
// and a probe leaves when its timer fires, which can be just after the
// stall that delayed its ACK ends.
const stallSlack = 200 * time.Millisecond

// ProbesAtStalls counts the loss probes that namespaces matching side
// sent in seconds in which a stall episode of at least StallReportMin
// began or went on (At), of all their probes counted between each one's
// first and last sample (Of). It is nil where the phase ran unwatched or
// no matching namespace was sampled twice.
func (r *PhaseResult) ProbesAtStalls(side func(ns string) bool) *report.ProbesAtStalls {
	return r.atStalls(side, func(c TCPCounters) uint64 { return c.LossProbes })
}

// RetransAtStalls is ProbesAtStalls for retransmitted segments: the
// figure the "retransmissions not above agent off" compares,
// with the share the machine's stalls can account for.
func (r *PhaseResult) RetransAtStalls(side func(ns string) bool) *report.ProbesAtStalls {
	return r.atStalls(side, func(c TCPCounters) uint64 { return c.RetransSegs })
}

// atStalls matches one cumulative counter's rises to the phase's stalls.
func (r *PhaseResult) atStalls(side func(ns string) bool, count func(TCPCounters) uint64) *report.ProbesAtStalls {
	if !r.StallsWatched() {
		return nil
	}
	eps := StallEpisodes(r.Stalls, StallReportMin)
	var out *report.ProbesAtStalls
	for ns, ss := range r.TCPSeries {
		if !side(ns) || len(ss) < 2 {
			continue
		}
		if out == nil {
			out = &report.ProbesAtStalls{}
		}
		for i := 1; i < len(ss); i++ {
			n := count(ss[i].C) - count(ss[i-1].C)
			if n == 0 {
				continue
			}
			out.Of += n
			from, to := ss[i-1].T-stallSlack, ss[i].T+stallSlack
			if slices.ContainsFunc(eps, func(e Episode) bool { return e.T < to && e.T+e.Late > from }) {
				out.At += n
			}
		}
	}
	return out
}
