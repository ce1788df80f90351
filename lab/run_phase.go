package lab

// What Runner.Run drives during a phase: the hosts' fio processes, the
// diskstats sampler, and the TCP counters around it.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sanqos/sanqos/sample"
)

// fioCommands writes each host's job file for phase p into pdir and
// returns the fio commands that run them, not started, each writing its
// JSON output and stderr next to its job file.
func fioCommands(p *Phase, hosts map[string]bool, pdir string) ([]*exec.Cmd, error) {
	var cmds []*exec.Cmd
	for h := range hosts {
		jf, err := JobFile(h, p.Jobs, filepath.Join(pdir, h))
		if err != nil {
			return nil, err
		}
		path := filepath.Join(pdir, h+".fio")
		if err := os.WriteFile(path, []byte(jf), 0o644); err != nil {
			return nil, err
		}
		cmd := exec.Command("ip", "netns", "exec", h, "fio", "--output-format=json", "--output="+filepath.Join(pdir, h+".json"), path)
		// If the run dies, its load must not outlive it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		errf, _ := os.Create(filepath.Join(pdir, h+".stderr"))
		cmd.Stderr = errf
		cmds = append(cmds, cmd)
	}
	return cmds, nil
}

// fioWait is the exit of a phase's fio processes: done is closed once all
// have exited, after which errs holds their failures.
type fioWait struct {
	done chan struct{}
	mu   sync.Mutex
	errs []string
}

// waitFio waits for the started cmds in the background.
func waitFio(cmds []*exec.Cmd) *fioWait {
	fw := &fioWait{done: make(chan struct{})}
	var wg sync.WaitGroup
	for _, c := range cmds {
		wg.Add(1)
		go func(c *exec.Cmd) {
			defer wg.Done()
			if err := c.Wait(); err != nil {
				fw.mu.Lock()
				fw.errs = append(fw.errs, fmt.Sprintf("%s: %v", c.Args[3], err))
				fw.mu.Unlock()
			}
		}(c)
	}
	go func() { wg.Wait(); close(fw.done) }()
	return fw
}

// waitBounded waits for the phase's fio to exit, at most limit (stretched
// in a TCG guest) past the phase's end, then kills it and says so: a fio
// stuck on a target that no longer answers must not hang `lab run`.
func (fw *fioWait) waitBounded(cmds []*exec.Cmd, limit time.Duration) error {
	limit *= Slowdown()
	select {
	case <-fw.done:
		return nil
	case <-time.After(limit):
	}
	for _, c := range cmds {
		c.Process.Kill()
	}
	select {
	case <-fw.done:
	case <-time.After(limit): // in D state on a dead device: not waited for
	}
	return fmt.Errorf("fio still running %v after the phase's end: killed", limit)
}

// phaseSampler samples the diskstats of the run resource's loop devices
// during a phase, writing each interval to the run's trace.
type phaseSampler struct {
	r     *Runner
	p     *Phase
	rep   int
	ds    *sample.Diskstats
	devs  map[string]string // device → host
	names []string
	prev  map[string]sample.Counters
}

// newPhaseSampler reads the run resource's loop devices once, the
// baseline of the phase's first interval.
func (r *Runner) newPhaseSampler(p *Phase, rep int) (*phaseSampler, error) {
	ds, err := sample.NewDiskstats("/proc", "/sys")
	if err != nil {
		return nil, err
	}
	sp := &phaseSampler{r: r, p: p, rep: rep, ds: ds, devs: map[string]string{}}
	for _, l := range r.Res.LUNs {
		sp.devs[l.Loop] = l.Host
		sp.names = append(sp.names, l.Loop)
	}
	if sp.prev, err = ds.Read(sp.names...); err != nil {
		return nil, err
	}
	return sp, nil
}

// sample reads the devices' counters at time at into the phase and
// returns each host's interval since the last read.
func (sp *phaseSampler) sample(at time.Duration) (Tick, error) {
	cur, err := sp.ds.Read(sp.names...)
	if err != nil {
		return Tick{}, err
	}
	t := Tick{T: at.Seconds(), Dev: map[string]sample.Interval{}}
	for dev, c := range cur {
		iv, err := sample.Diff(sp.prev[dev], c)
		if err != nil {
			continue // device replaced: skip one interval, re-baseline
		}
		h := sp.devs[dev]
		t.Dev[h] = iv
		sp.r.trace.Write([]string{sp.r.TracePrefix + sp.p.Name, strconv.Itoa(sp.rep), ff(t.T, 3), h, dev, strconv.FormatUint(iv.Reads, 10), strconv.FormatUint(iv.Writes, 10),
			ff(iv.ReadWaitMs, 3), ff(iv.WriteWaitMs, 3), ff(iv.ReadBps/1e6, 3), ff(iv.WriteBps/1e6, 3), strconv.FormatUint(iv.InFlight, 10)})
	}
	sp.prev = cur
	return t, nil
}

// tcpSince is the TCP counters' change since before, by namespace and in
// total, over the namespaces read both times.
func tcpSince(before map[string]TCPCounters) (map[string]TCPCounters, TCPCounters) {
	byNS := map[string]TCPCounters{}
	var total TCPCounters
	for ns, c := range tcpByNS() {
		if b, ok := before[ns]; ok {
			byNS[ns] = c.Sub(b)
			total = total.Add(c.Sub(b))
		}
	}
	return byNS, total
}
