package experiments

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// cluster-autonomic's fault phase: the leader and etcd killed mid-run
// under fio verify, and what must hold through it.

// faultSample is one 100 ms look at the cluster during the faults phase.
type faultSample struct {
	at     time.Duration
	delays map[string]float64
	rec    cluster.Shared
	recErr error
	modes  map[string]cluster.ResourceStatus
}

// faults runs the writers (three time-based and one verified thread per
// writer host) under cluster control, kills the resource's leader a
// quarter into the writers' window (restarting it 2 s later, as a
// supervisor would) and etcd at half (restarting it after 8 s, longer
// than Fresh + Decay, so the release is seen whole).
//
// It is long because it is the experiment's script, read top to bottom
// in the order it runs; split, one timeline would be spread over several
// functions.
func (c *clusterRun) faults(cli *clientv3.Client) (ClusterFaults, error) {
	f := ClusterFaults{ReleasedS: map[string]float64{}, FellBackS: map[string]float64{}, Flaps: map[string]int{}, BoundS: (cluster.DefaultFresh + cluster.DefaultDecay).Seconds(), LeaderDownS: 2, EtcdDownS: 8}
	ca, err := c.newAgents(true)
	if err != nil {
		return f, err
	}
	defer ca.stop()
	// The faults come after the cluster has settled, each far enough
	// from the next to be seen whole; the writers run until etcd has been
	// back for a while.
	etcdDown := time.Duration(f.EtcdDownS * float64(time.Second))
	killLeaderAt := c.lead + max(c.on/4, 3*time.Second)
	killEtcdAt := killLeaderAt + max(c.on/4, 6*time.Second)
	on := max(c.on, killEtcdAt+etcdDown+6*time.Second-c.lead)
	p := c.faultsPhase(on)
	var (
		mu      sync.Mutex
		samples []faultSample
		killed  string
		etcdAt  [2]time.Duration // killed, restarted
		errs    []error
		restart sync.WaitGroup // the killed leader's and etcd's restarts
	)
	note := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	t0 := time.Now()
	go func() {
		defer close(done)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		leaderDone, etcdDone := false, false
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			at := time.Since(t0)
			s := faultSample{at: at, delays: ca.sample(), modes: ca.modes()}
			s.rec, s.recErr = leaderOf(cli, c.r.Res.Name)
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
			switch {
			case !leaderDone && at >= killLeaderAt:
				leaderDone = true
				if s.recErr != nil {
					note(fmt.Errorf("no leader to kill at %v: %w", at, s.recErr))
					continue
				}
				killed = s.rec.Leader
				a := ca.get(killed)
				if a == nil {
					note(fmt.Errorf("leader %q is not one of the lab's agents", killed))
					continue
				}
				a.Kill()
				restart.Add(1)
				go func() {
					defer restart.Done()
					time.Sleep(time.Duration(f.LeaderDownS * float64(time.Second)))
					if err := ca.start(killed); err != nil {
						note(err)
					}
				}()
			case !etcdDone && at >= killEtcdAt:
				etcdDone = true
				if err := lab.KillEtcd(); err != nil {
					note(err)
					continue
				}
				mu.Lock()
				etcdAt[0] = time.Since(t0)
				mu.Unlock()
				restart.Add(1)
				go func() {
					defer restart.Done()
					time.Sleep(etcdDown)
					if err := lab.StartEtcd(); err != nil {
						note(err)
					}
					mu.Lock()
					etcdAt[1] = time.Since(t0)
					mu.Unlock()
				}()
			}
		}
	}()
	res, cp, err := c.run(p, ca)
	close(stop)
	<-done
	restart.Wait()
	if !lab.EtcdRunning() {
		err = cmp.Or(err, lab.StartEtcd())
	}
	f.ClusterPhase, f.Leader = cp, killed
	if res != nil && res.FioErr != nil {
		f.IOErrors, f.FioError = 1, res.FioErr.Error()
		err = nil // judged below, reported in the summary
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		return f, errors.Join(errs...)
	}
	c.judgeFaults(&f, samples, killLeaderAt, etcdAt)
	err = cmp.Or(err, c.writeTimeline(samples))
	return f, err
}

// faultsPhase is the faults phase, on long: the cluster phase's writers
// and one verified writer per writer host. The time-based writers keep to
// the first three quarters of each LUN and the verified writer to the
// last, so no job overwrites what another will check.
func (c *clusterRun) faultsPhase(on time.Duration) *lab.Phase {
	p := c.mkPhaseOn("faults", "cluster control; leader and etcd killed", 9, on)
	lun := c.r.State.Options.LUNSize
	size := min(max(int64(c.r.opts.Scale*32)<<20, 8<<20), lun/4) / 65536 * 65536
	for i := range p.Jobs {
		if p.Jobs[i].Name == "writer" {
			p.Jobs[i].Size = lun / 4 / 65536 * 65536
		}
	}
	for _, h := range lab.Hosts[1:] {
		j := c.r.verifiedWriter(h, 1, size)
		j.Start, j.Offset = c.lead, lun/4*3/65536*65536
		p.Jobs = append(p.Jobs, j)
	}
	return p
}

// judgeFaults reads the samples: the first record of a new leader after
// the kill; per agent, the first sample off the shared step (fell back),
// the first on its own controller alone (released) after etcd died, and
// how often it left cluster mode after rejoining; the first new record
// after etcd came back.
func (c *clusterRun) judgeFaults(f *ClusterFaults, samples []faultSample, killLeaderAt time.Duration, etcdAt [2]time.Duration) {
	sort.Slice(samples, func(i, k int) bool { return samples[i].at < samples[k].at })
	for _, s := range samples {
		if s.at > killLeaderAt && s.recErr == nil && s.rec.Leader != f.Leader && f.NewLeaderS == 0 {
			f.NewLeaderS = report.Round((s.at - killLeaderAt).Seconds(), 2)
		}
	}
	for _, t := range c.targets {
		f.FellBackS[t.NS] = -1
		for _, s := range samples {
			if m, ok := s.modes[t.NS]; ok && s.at >= etcdAt[0] && m.Mode != cluster.ModeCluster {
				f.FellBackS[t.NS] = report.Round((s.at - etcdAt[0]).Seconds(), 2)
				break
			}
		}
		joined := false
		for _, s := range samples {
			m, ok := s.modes[t.NS]
			if !ok || etcdAt[1] == 0 || s.at < etcdAt[1] {
				continue
			}
			if m.Mode == cluster.ModeCluster {
				joined = true
			} else if joined {
				f.Flaps[t.NS]++
				joined = false
			}
		}
		f.ReleasedS[t.NS] = -1 // not released while etcd was down
		for _, s := range samples {
			m, ok := s.modes[t.NS]
			if ok && s.at >= etcdAt[0] && (etcdAt[1] == 0 || s.at < etcdAt[1]) && m.Mode == cluster.ModeLocal {
				f.ReleasedS[t.NS] = report.Round((s.at - etcdAt[0]).Seconds(), 2)
				break
			}
		}
	}
	var seq uint64
	for _, s := range samples {
		if s.at < etcdAt[0] && s.recErr == nil {
			seq = max(seq, s.rec.Seq)
		}
		if etcdAt[1] > 0 && s.at > etcdAt[1] && s.recErr == nil && s.rec.Seq > seq {
			f.RejoinedS = report.Round((s.at - etcdAt[1]).Seconds(), 2)
			break
		}
	}
}

// writeTimeline saves the faults phase's samples (faults-timeline.csv):
// per 100 ms, the leader's record and each agent's largest write delay.
func (c *clusterRun) writeTimeline(samples []faultSample) error {
	var b strings.Builder
	b.WriteString("t_s,leader,seq,shared_step,record_error")
	for _, t := range c.targets {
		b.WriteString(",delay_ms_" + t.NS + ",mode_" + t.NS + ",applied_step_" + t.NS)
	}
	b.WriteString("\n")
	for _, s := range samples {
		e := ""
		if s.recErr != nil {
			e = strings.ReplaceAll(s.recErr.Error(), ",", ";")
		}
		fmt.Fprintf(&b, "%.2f,%s,%d,%d,%s", s.at.Seconds(), s.rec.Leader, s.rec.Seq, s.rec.Step, e)
		for _, t := range c.targets {
			m, ok := s.modes[t.NS]
			if !ok {
				m.Mode, m.Applied = "down", math.NaN()
			}
			fmt.Fprintf(&b, ",%g,%s,%g", s.delays[t.NS], m.Mode, m.Applied)
		}
		b.WriteString("\n")
	}
	return os.WriteFile(filepath.Join(c.r.Dir, "faults-timeline.csv"), []byte(b.String()), 0o644)
}
