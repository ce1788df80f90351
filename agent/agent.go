package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/cost"
	"github.com/sanqos/sanqos/internal/version"
	"github.com/sanqos/sanqos/throttle"
)

// Discoverer reports the current topology (discover package adapters).
type Discoverer interface {
	Discover() (*Topology, error)
}

// Deps are what the agent is built from; cmd/sanqos wires the real ones.
type Deps struct {
	Throttle      throttle.Throttle
	Sampler       Sampler
	Rates         RateSampler // optional: per-consumer rates from TCP_INFO
	Discoverer    Discoverer
	NewController func(cfg *config.Config, r config.Resource) Controller
	NewSmoother   func(alpha float64) Smoother
	Log           *slog.Logger
	// ControlAPI, when set, is served under /v1/ on the HTTP listener to
	// requests carrying the config's token (and refused without one).
	ControlAPI http.Handler
	// NewDiscoverer, when set, builds the discoverer of a reloaded config
	// (its resources, devices and discovery settings); without it a
	// reload keeps Discoverer.
	NewDiscoverer func(*config.Config) (Discoverer, error)
}

// Agent is a running sanqos daemon.
type Agent struct {
	deps     Deps
	loops    *Loops
	mu       sync.Mutex
	cfg      *config.Config
	reg      *prometheus.Registry
	ticks    prometheus.Histogram
	discErrs prometheus.Counter
	lastDisc string
	// lastTopo is the last topology discovery published: what the next
	// round's is compared with, so the log says each change once.
	lastTopo *Topology
	// discGen counts the discoverers a reload swapped in: a round of the
	// old one that ends after the swap publishes nothing.
	discGen int
	// reloadMu makes reloads one at a time (SIGHUP, the API, a cluster
	// policy); reloaded tells the discovery loop one happened.
	reloadMu sync.Mutex
	reloaded chan struct{}
	reloads  reloadMetrics
}

// New builds an agent from a validated config.
func New(cfg *config.Config, d Deps) *Agent {
	a := &Agent{deps: d, cfg: cfg, reg: prometheus.NewRegistry(), reloaded: make(chan struct{}, 1)}
	a.loops = NewLoops(LoopConfig{
		Interval: cfg.Interval, DelayStep: cfg.DelayStep, MaxDelay: cfg.MaxDelay, WriteBps: cfg.WriteMBs * 1e6, RiseStep: cfg.DelayRise,
		Onset: cfg.OnsetFeedForward, IdleHold: cfg.IdleHold, RateLeverSteps: cfg.RateLeverSteps, BulkQueue: cfg.ThrottleableQueue, ReadBps: cfg.ReadMBs * 1e6, Cost: cost.Default(),
		NewRateSmoother: func() Smoother { return d.NewSmoother(cfg.EWMAAlpha) },
	}, d.Sampler, d.Throttle, d.Log)
	if d.Rates != nil {
		a.loops.UseRates(d.Rates)
	}
	a.ticks = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sanqos_tick_duration_seconds",
		Help: "Time to run one control tick: sample, every resource's stages, one batch to the backend.", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14)})
	a.discErrs = prometheus.NewCounter(prometheus.CounterOpts{Name: "sanqos_discovery_errors_total", Help: "Failed discovery rounds."})
	a.loops.OnTick(func(d time.Duration) { a.ticks.Observe(d.Seconds()) })
	// max_delay needs a restart to change (Reload), so it is set once:
	// alerts compare consumers' delays with it (a consumer pinned there).
	maxDelay := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sanqos_max_delay_seconds",
		Help: "The config's max_delay: the largest delay a controller gives a consumer."})
	maxDelay.Set(cfg.MaxDelay.Seconds())
	applyErrs := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sanqos_throttle_apply_errors_total",
		Help: "Batches of throttle changes the backend refused (each is retried next tick; the log says why)."},
		func() float64 { return float64(a.loops.ApplyErrors()) })
	// The backend's guard puts back what an operator's firewall flush or
	// qdisc deletion removed (throttle/guard.go) and logs it once a
	// minute at most; the count tells a one-off from something that
	// keeps removing them.
	reinstalls := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sanqos_throttle_reinstalls_total",
		Help: "Times the backend found its kernel objects (rules, sets, qdiscs, filters) removed by someone else and reinstalled them with the current throttles."},
		func() float64 {
			if r, ok := d.Throttle.(throttle.Reinstaller); ok {
				return float64(r.Reinstalls())
			}
			return 0
		})
	a.reloads = newReloadMetrics(time.Now())
	v := version.Get()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sanqos_build_info",
		Help:        "Always 1; its labels say which build runs (join on it to tell agents of different builds apart).",
		ConstLabels: prometheus.Labels{"version": v.Version, "commit": v.Commit, "goversion": v.GoVersion}})
	buildInfo.Set(1)
	a.reg.MustRegister(newCollector(a.loops.Status, d.Throttle), eventsCollector{a.loops}, portsCollector{a.unthrottled}, a.ticks, a.discErrs, maxDelay, applyErrs, reinstalls, buildInfo, a.reloads.ok, a.reloads.at,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if c := throttle.CollectorOf(d.Throttle); c != nil {
		a.reg.MustRegister(c)
	}
	a.loops.SetSpecs(a.specs(cfg))
	return a
}

func toSet(list []string) map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	for _, s := range list {
		if a, err := netip.ParseAddr(s); err == nil { // validated by config
			m[a.Unmap()] = true
		}
	}
	return m
}

// specs are cfg's resources as the loops run them.
func (a *Agent) specs(cfg *config.Config) map[string]ResourceSpec {
	specs := map[string]ResourceSpec{}
	for _, r := range cfg.Resources {
		r := r
		specs[r.Name] = ResourceSpec{
			Name: r.Name, Threshold: r.Threshold, Important: toSet(r.Important), Throttleable: toSet(r.Throttleable),
			ProtectImportantOnly: r.Policy == "important-sets",
			NewController:        func() Controller { return a.deps.NewController(cfg, r) },
			NewSmoother:          func() Smoother { return a.deps.NewSmoother(cfg.EWMAAlpha) },
			NewPolicy:            PolicyFactory(r),
			TailObjective:        r.Objective == "p95",
			AutoThreshold:        r.ThresholdAuto,
			NewControllerAt: func(t time.Duration) Controller {
				at := r
				at.Threshold = t
				return a.deps.NewController(cfg, at)
			},
		}
	}
	return specs
}

// Step runs one control tick at time now (Loops.Step): what Run does on
// its ticker, without wall-clock reads. The simulator and benchmarks
// drive the agent this way; topology comes from SetTopology.
func (a *Agent) Step(now time.Time) error { return a.loops.Step(now) }

// SetTopology publishes a topology directly (instead of discovery).
func (a *Agent) SetTopology(t *Topology) { a.loops.SetTopology(t) }

// Resources returns every resource loop's last status.
func (a *Agent) Resources() []ResourceStatus { return a.loops.Status() }

// Release clears every throttle that Step applied, with a release event
// for each consumer a resource slowed.
func (a *Agent) Release() {
	a.loops.Release()
	a.loops.releaseEvents(nil, releaseStopped, time.Now())
}

// Status is the document served at /v1/status and /api/status.
type Status struct {
	Backend   string                      `json:"backend"`
	Resources []ResourceStatus            `json:"resources"`
	Throttles map[string]throttle.Setting `json:"throttles"`
	Discovery string                      `json:"discovery_error,omitempty"`
	// Sources is the target software discovery last read (source auto:
	// what it found on the host).
	Sources []string `json:"discovery_sources,omitempty"`
	// UnthrottledPorts are the TCP ports the target exports on that the
	// agent neither throttles nor samples (Topology.Unthrottled).
	UnthrottledPorts []uint16  `json:"unthrottled_ports,omitempty"`
	Time             time.Time `json:"time"`
}

// Status returns the agent's current state.
func (a *Agent) Status() Status {
	s := Status{Backend: a.deps.Throttle.Name(), Resources: a.loops.Status(), Throttles: map[string]throttle.Setting{}, UnthrottledPorts: a.unthrottled(), Time: time.Now()}
	for k, v := range a.deps.Throttle.List() {
		s.Throttles[k.String()] = v
	}
	a.mu.Lock()
	s.Discovery = a.lastDisc
	if a.lastTopo != nil {
		s.Sources = a.lastTopo.Sources
	}
	a.mu.Unlock()
	return s
}

// unthrottled are the target's TCP ports that the agent does not
// throttle, in the topology the ticks run on.
func (a *Agent) unthrottled() []uint16 { return a.loops.gen.Load().topo.Unthrottled }

// Metrics is the Prometheus handler.
func (a *Agent) Metrics() http.Handler {
	return promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg})
}

// Run runs discovery and a tick (Step) every interval until ctx ends,
// then releases every throttle the ticks applied, with a release event
// for each consumer a resource slowed.
func (a *Agent) Run(ctx context.Context) error {
	go a.discoverLoop(ctx)
	if s := throttle.CountingOf(a.deps.Throttle); s != nil {
		go a.watchLateness(ctx, s)
	}
	err := a.loops.Run(ctx)
	a.loops.releaseEvents(nil, releaseStopped, time.Now())
	return err
}

// ConnWatcher is a RateSampler that also signals when the target's
// connections come or go (sample.TCPRates).
type ConnWatcher interface {
	ConnChanges() <-chan struct{}
}

// discoverLoop refreshes the topology. Discovery (tgtadm: a process per
// round) is the agent's most expensive periodic work, so when the rate
// sampler reports connection changes it runs on a change, once more an
// interval later, and every discovery.refresh; otherwise every interval.
// A failure keeps the last good topology and is logged once per distinct
// error, so a dead target does not flood the log. A reload runs a round
// itself (Reload) and restarts the loop's timing on its settings.
func (a *Agent) discoverLoop(ctx context.Context) {
	if a.discoverer() == nil {
		return
	}
	var changes <-chan struct{}
	if w, ok := a.deps.Rates.(ConnWatcher); ok {
		changes = w.ConnChanges()
	}
	d := a.discoverySettings()
	t := time.NewTicker(d.Interval)
	defer t.Stop()
	var last time.Time
	again := false // rediscover at the next tick (a change is settling)
	for {
		last = time.Now()
		a.discoverOnce()
		for {
			select {
			case <-ctx.Done():
				return
			case <-a.reloaded:
				d, last = a.discoverySettings(), time.Now()
				t.Reset(d.Interval)
				continue
			case <-changes:
				again = true
			case <-t.C:
				if changes != nil && !again && time.Since(last) < d.Refresh {
					continue
				}
				again = false
			}
			break
		}
	}
}

func (a *Agent) discoverySettings() config.Discovery {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg.Discovery
}

func (a *Agent) discoverer() Discoverer {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.deps.Discoverer
}

func (a *Agent) discoverOnce() {
	a.mu.Lock()
	disc, gen := a.deps.Discoverer, a.discGen
	a.mu.Unlock()
	topo, err := disc.Discover()
	a.mu.Lock()
	defer a.mu.Unlock()
	if gen != a.discGen {
		return // a reload swapped the discoverer meanwhile and ran its own round
	}
	if err != nil {
		a.discErrs.Inc()
		if err.Error() != a.lastDisc {
			a.deps.Log.Warn("discovery failed; keeping the last topology", "err", err)
		}
		a.lastDisc = err.Error()
		return
	}
	a.noteTopology(topo)
	a.loops.SetTopology(topo)
}

// noteTopology logs what changed since the last topology published and
// keeps topo as that; a.mu is held.
func (a *Agent) noteTopology(topo *Topology) {
	if a.lastDisc != "" {
		a.deps.Log.Info("discovery recovered")
	}
	a.lastDisc = ""
	logMappingChanges(a.deps.Log, a.lastTopo, topo)
	a.lastTopo = topo
}

// ServeHTTP starts the HTTP listener: read-only views (/metrics,
// /api/status and what extra adds), plus the control API under /v1/ for
// requests with the configured bearer token.
func (a *Agent) ServeHTTP(ctx context.Context, addr string, extra func(*http.ServeMux)) error {
	if addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http listener: %w", err)
	}
	mux := http.NewServeMux()
	if a.deps.ControlAPI != nil {
		mux.Handle("/v1/", tokenOnly(a.cfg.Token, a.deps.ControlAPI))
	}
	mux.Handle("GET /metrics", a.Metrics())
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, a.Status()) })
	if extra != nil {
		extra(mux)
	}
	srv := &http.Server{Handler: sameOrigin(mux), ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.deps.Log.Error("http listener", "err", err)
		}
	}()
	a.deps.Log.Info("http listening", "addr", l.Addr().String())
	return nil
}
