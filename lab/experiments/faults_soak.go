package experiments

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/report"
)

// The reliability experiment's soak: the agent throttling for 30 minutes
// (x scale), its memory and goroutines scraped throughout.

// SoakSample is the agent's footprint at one moment of the soak.
type SoakSample struct {
	T          float64 `json:"t_s"`
	RSSBytes   float64 `json:"rss_bytes"`
	Goroutines float64 `json:"goroutines"`
	FDs        float64 `json:"open_fds"`
}

// scrapeAgent reads the agent's own process metrics from its HTTP
// listener inside the target namespace.
func scrapeAgent(addr string) (SoakSample, error) {
	out, err := lab.InNS(lab.TargetNS, "curl", "-sf", "--max-time", "2", "http://"+addr+"/metrics")
	if err != nil {
		return SoakSample{}, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(out))
	if err != nil {
		return SoakSample{}, fmt.Errorf("agent metrics: %w", err)
	}
	gauge := func(name string) float64 {
		if mf := mfs[name]; mf != nil && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
		return 0
	}
	s := SoakSample{RSSBytes: gauge("process_resident_memory_bytes"), Goroutines: gauge("go_goroutines"), FDs: gauge("process_open_fds")}
	if s.RSSBytes == 0 || s.Goroutines == 0 {
		return s, errors.New("agent metrics lack process_resident_memory_bytes or go_goroutines")
	}
	return s, nil
}

// faultSoak runs the autonomic agent for 30 minutes × scale under load
// that changes every segment, and checks that its memory, goroutines and
// file descriptors stay flat and that it leaves nothing behind.
func faultSoak(r *runner) Fault {
	length := r.Scale(30 * time.Minute)
	f := Fault{Name: fmt.Sprintf("soak: %v of changing load", length), Expect: "RSS +≤ 20 %, goroutines +≤ 5, fds +≤ 3 from the first to the last third; no rule or set left after stop", Data: "n/a"}
	a, err := r.startAutonomic("soak")
	if err != nil {
		return failed(f, err)
	}
	stopped := false
	defer func() {
		if !stopped {
			a.Stop()
		}
	}()
	w0 := a.Warnings()
	seg := max(length/12, 5*time.Second)
	p := &lab.Phase{Name: "soak", Label: "soak", Length: length, From: 0, To: length, Jobs: []lab.Job{r.reader(length)}}
	writers := []int{12, 0, 3, 12, 6, 0, 12, 3, 6, 12, 0, 12}
	for i, at := 0, time.Duration(0); at+seg <= length; i, at = i+1, at+seg {
		for _, j := range r.writers(writers[i%len(writers)], at, seg) {
			j.Name = fmt.Sprintf("writer-%d", i)
			p.Jobs = append(p.Jobs, j)
		}
	}
	var samples []SoakSample
	var scrapeErr error
	every := max(length/30, 2*time.Second)
	for t := every; t < length; t += every {
		p.Events = append(p.Events, lab.Event{At: t, Name: "scrape agent", Do: func() error {
			s, err := scrapeAgent("127.0.0.1:9311")
			if err != nil {
				scrapeErr = err
				return nil
			}
			s.T = t.Seconds()
			samples = append(samples, s)
			return nil
		}})
	}
	_, err = f.run(r, p)
	if err != nil {
		return failed(f, err)
	}
	if scrapeErr != nil || len(samples) < 6 {
		return failed(f, fmt.Errorf("%d samples; last scrape error: %v", len(samples), scrapeErr))
	}
	f.LogLines = a.Warnings() - w0
	alive := a.Alive()
	stopErr := a.Stop()
	stopped = true
	left, err := labelledObjects(labAgentLabel)
	if err != nil {
		return failed(f, err)
	}
	third := len(samples) / 3
	first, last := samples[:third], samples[len(samples)-third:]
	med := func(ss []SoakSample, g func(SoakSample) float64) float64 {
		var v []float64
		for _, s := range ss {
			v = append(v, g(s))
		}
		return report.Describe(v).P50
	}
	rss := func(s SoakSample) float64 { return s.RSSBytes }
	gor := func(s SoakSample) float64 { return s.Goroutines }
	fds := func(s SoakSample) float64 { return s.FDs }
	r0, r1 := med(first, rss), med(last, rss)
	g0, g1 := med(first, gor), med(last, gor)
	f0, f1 := med(first, fds), med(last, fds)
	f.Result = fmt.Sprintf("RSS %.1f → %.1f MiB, goroutines %.0f → %.0f, fds %.0f → %.0f (medians of first and last third, %d samples); %d objects left after stop",
		r0/(1<<20), r1/(1<<20), g0, g1, f0, f1, len(samples), len(left))
	f.Pass = alive && stopErr == nil && r1 <= 1.2*r0 && g1 <= g0+5 && f1 <= f0+3 && len(left) == 0
	lab.WriteJSON(filepath.Join(r.Dir, "soak-samples.json"), samples)
	return f
}
