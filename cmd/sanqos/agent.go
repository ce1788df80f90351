package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/dashboard"
	"github.com/sanqos/sanqos/internal/cli"
	"github.com/sanqos/sanqos/sample"
	"github.com/sanqos/sanqos/throttle"
	"github.com/spf13/cobra"
)

// backendOptions choose the throttle backend (one of throttle.Names) and
// configure it.
type backendOptions struct {
	Name string
	// DryRun (--dry-run) runs the dry-run backend whatever the config or
	// --backend names, so a shadow agent runs from the operator's own
	// config file, unedited: it decides everything and touches no kernel
	// state.
	DryRun bool
	// NoReinstall (--no-reinstall) keeps the backend from putting back
	// rules, sets or qdiscs that someone else removed: for experiments
	// that take the agent's rules out on purpose (lab
	// overhead-interleaved), which a guard would undo within a tick.
	NoReinstall bool
	// QuickAck (config quick_ack, flag --quick-ack) sets the quickack
	// route metric while a delay backend runs (throttle/quickack.go).
	QuickAck bool
	// Port is --iscsi-port: the one port throttled without a config (a
	// config's ports replace it; the flag overrides them).
	Port int
	throttle.Options
}

// dryRunBackend is the registry's backend that only records settings.
const dryRunBackend = "dry-run"

// resolve returns the options in effect: a config's backend settings
// replace the flags' defaults (a flag given on the command line was
// written into the config first: overrideConfig); without one, a delay line that delays ACKs
// (--write-delay-on acks) follows each sender's srtt unless --delay-follow
// says otherwise, because
// manual throttles have no control loop waiting for the delay to bite, so
// the few round trips the srtt cap takes cost nothing and save every
// spurious probe.
func (o backendOptions) resolve(cfg *config.Config, followFlagSet bool) backendOptions {
	if cfg == nil {
		// Only delayed ACKs draw probes; replies held on the target are
		// never retransmitted while held, so they need no cap.
		if !followFlagSet && o.WriteOn == "acks" {
			o.Follow = true
		}
		return o.shadowed()
	}
	o.Name, o.Ports, o.Follow, o.WriteOn = cfg.Backend, cfg.TCPPorts(), cfg.DelayFollow, cfg.WriteDelayOn
	o.QuickAck = cfg.QuickAck
	o.MaxDelay, o.Step = cfg.MaxDelay, cfg.DelayStep
	// The backend checks its kernel objects once a control tick, so a
	// flushed firewall is put back before the next tick or the one after.
	o.Check = cfg.Interval
	if cfg.Device != "" {
		o.Device = cfg.Device
	}
	if cfg.Mode == "bridge" {
		o.Chain = "FORWARD"
	}
	return o.shadowed()
}

// shadowed applies --dry-run last, so neither the config nor --backend
// can put a kernel backend under a shadow agent; and --no-reinstall,
// which no config undoes either.
func (o backendOptions) shadowed() backendOptions {
	if o.DryRun {
		o.Name = dryRunBackend
	}
	if o.NoReinstall {
		o.Check = -1
	}
	return o
}

// agentCmd is the agent command's help text and flag table, which read
// best in one place (the help is long: it is the agent's manual page); it
// is one function for that reason, and its work is runAgent's.
func agentCmd() *cobra.Command {
	socket := agent.DefaultSocket
	bo := backendOptions{Name: "auto", QuickAck: true, Port: 3260, Options: throttle.Options{Chain: "OUTPUT", Label: "sanqos"}}
	var logJSON bool
	var cfgPath, httpAddr string
	var eo etcdOptions
	c := &cobra.Command{
		Use:   "agent",
		Short: "Run the sanqos daemon (foreground; systemd-friendly)",
		Long: `Runs the agent in the foreground. With --config it discovers resources and
consumers, samples /proc/diskstats every interval and runs one controller per
resource; without, it only serves manual throttles (sanqos throttle ...).
It owns the throttle backend and serves the control API on a root-only unix
socket; it needs root. Logs go to stderr (logfmt, or JSON with --log-json).
SIGTERM/SIGINT remove every rule, set, qdisc and queue it created, after
letting held packets go. 'sanqos reload' (or SIGHUP) reloads the config
whole, its discovery included, or refuses it whole with the reason (the
old one stays active; 'sanqos reload' exits non-zero with it).

With --config it also serves, read-only, on the config's http address
(default 127.0.0.1:9311; --http overrides, port 0 picks a free one and logs
it; without --config only when --http is given, with no resources):
  /            the live dashboard: per resource, read wait vs threshold, the
               applied delay and write/read rates, updated every second
               with the last five minutes; consumers sortable by rate/delay
  /metrics     Prometheus metrics (grafana/sanqos-dashboard.json and the
               alert rules in prometheus/sanqos-alerts.yml use them)
  /api/status  the status document ('sanqos status --json' gets the same)
These views change nothing; throttles are set over the root-only unix
socket (or, only with token_file set, /v1/ with a bearer token: see
SECURITY.md). The page uses relative URLs, so it works through an
SSH tunnel or a reverse proxy: to watch a remote agent that listens on
localhost, run 'ssh -L 9311:127.0.0.1:9311 target-host' and open
http://127.0.0.1:9311/. Listening on all interfaces (--http 0.0.0.0:9311)
exposes read-only state to the network; firewall it.

Before the first start, 'sanqos doctor --config FILE' says whether the agent
could run here with that config, and if not, why (it changes nothing).

--dry-run makes a shadow agent: with the config as it is, it discovers,
measures and runs every controller and policy, and shows in status, the
dashboard and /metrics whom it would slow and by how much, but its backend
is dry-run whatever the config names: it creates no rule, set, qdisc, BPF
program or queue and touches no packet. It uses the config's socket and
http address, so stop it before the real agent starts (or give it its own).

In the lab, the experiments' agent runs in namespace bm: see
'sanqos-lab lab dashboard'.`,
		Example: `  sanqos agent --config /etc/sanqos/sanqos.yaml
  sanqos agent --config /etc/sanqos/sanqos.yaml --dry-run   # shadow: decides, applies nothing
  sanqos agent --config /etc/sanqos/sanqos.yaml --http 0.0.0.0:9311
  ssh -L 9311:127.0.0.1:9311 storage1   # then open http://127.0.0.1:9311/
  sanqos agent --backend delayline
  sanqos agent --backend delayline --http 127.0.0.1:9311   # manual throttles, with the dashboard
  ip netns exec bm sanqos agent --backend delayline --socket /run/sanqos-lab/agent.sock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Signals are caught before anything else: systemd may reload
			// (SIGHUP) or stop (SIGTERM) the agent at any moment after
			// it started, and Go's default for either is to exit at once,
			// leaving what the backend built so far in the kernel; a
			// SIGHUP death even counts as clean, so Restart=on-failure
			// would not restart it. A stop before the agent runs ends it
			// once its backend is built (and then removed); a reload
			// before then is answered once the config is watched.
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			var h slog.Handler = slog.NewTextHandler(os.Stderr, nil)
			if logJSON {
				h = slog.NewJSONHandler(os.Stderr, nil)
			}
			log := slog.New(h)
			var cfg *config.Config
			// The flags as given, before a config fills in the rest.
			override, overridden := overrideConfig(cmd.Flags().Changed, agentFlagValues{bo, httpAddr})
			if cfgPath != "" {
				var err error
				if cfg, err = config.Load(cfgPath); err != nil {
					return err
				}
				for _, w := range cfg.Warnings {
					log.Warn("config", "warning", w)
				}
				if !cmd.Flags().Changed("socket") {
					socket = cfg.Socket
				}
				override(cfg)
				if len(overridden) > 0 {
					log.Info("command-line flags override the config", "keys", strings.Join(overridden, ","))
				}
			}
			bo = bo.resolve(cfg, cmd.Flags().Changed("delay-follow"))
			if eo.Endpoints != "" && cfg == nil {
				return errors.New("--etcd needs --config: a cluster shares the policies of configured resources")
			}
			if err := eo.validate(); err != nil {
				return err
			}
			return runAgent(ctx, hup, cfg, cfgPath, bo, socket, httpAddr, override, eo, log)
		},
	}
	f := c.Flags()
	f.StringVar(&cfgPath, "config", "", "YAML config (see examples/sanqos.yaml); without it, manual throttles only")
	f.StringVar(&socket, "socket", socket, "control socket path (root-only)")
	f.StringVar(&bo.Name, "backend", bo.Name, "throttle backend: "+strings.Join(throttle.Names(), "|")+" (overrides the config's backend; see 'sanqos throttle backends')")
	f.BoolVar(&bo.DryRun, "dry-run", false, "decide everything, apply nothing: the dry-run backend whatever the config names (a shadow agent; touches no kernel state)")
	f.IntVar(&bo.Port, "iscsi-port", bo.Port, "the target's TCP port whose traffic is throttled (overrides the config's ports and iscsi_port: this port alone)")
	f.StringVar(&bo.Chain, "chain", bo.Chain, "netfilter chain: OUTPUT (target mode) or FORWARD (bridge mode)")
	f.StringVar(&bo.Label, "label", bo.Label, "label of the kernel objects this agent creates")
	f.StringVar(&bo.Device, "interface", "", "network interface towards the consumers, for netem and htb (default: the only non-loopback one; overrides the config's device)")
	f.StringVar(&bo.WriteOn, "write-delay-on", "replies", "which packets carry a write delay: replies (the target's R2Ts and status; no spurious loss probes) or acks (the thesis' delayed ACKs) (overrides the config's write_delay_on)")
	f.BoolVar(&bo.Follow, "delay-follow", bo.Follow, "cap each packet's delay by a model of its sender's srtt: the fastest rise without spurious tail-loss probes (default on without --config with --write-delay-on acks; with --config, the config's delay_follow, which the flag overrides)")
	f.BoolVar(&bo.NoReinstall, "no-reinstall", false, "do not put back the backend's rules, sets and qdiscs when someone else removes them (by default they are checked every control tick and reinstalled with the current throttles); for experiments that remove them on purpose")
	f.IntVar(&bo.QueueLimit, "queue-limit", 0, "most packets the delay line holds at once; beyond it the soonest-due leaves early (default 4096)")
	f.StringVar(&httpAddr, "http", "", "HTTP listener for the dashboard and /metrics (overrides the config's http; \"\" turns it off; without --config, off unless given)")
	f.BoolVar(&logJSON, "log-json", false, "log JSON instead of logfmt")
	f.StringVar(&eo.Endpoints, "etcd", "", "etcd endpoints (comma-separated URLs): share policies, indicators and per-resource delays with the other target hosts' agents (package cluster); without it the agent runs alone")
	f.StringVar(&eo.ID, "etcd-id", "", "this agent's id in the cluster (default: the hostname)")
	f.StringVar(&eo.Prefix, "etcd-prefix", cluster.DefaultPrefix, "prefix of the cluster's etcd keys")
	f.DurationVar(&eo.Fresh, "etcd-fresh", cluster.DefaultFresh, "how long a shared step is followed after it arrived; then the agent falls back to its own controller (100ms..1s)")
	f.DurationVar(&eo.Decay, "etcd-decay", cluster.DefaultDecay, "how long a lost shared step takes to decay to zero: the bound on a throttle outliving its cluster (100ms..1m)")
	f.BoolVar(&bo.QuickAck, "quick-ack", bo.QuickAck, "set the quickack route metric on the consumers' interface's connected routes while a delay backend holds replies, so no ACK waits behind a held reply (overrides the config's quick_ack)")
	cli.RenamedFlag(f, "device", "interface") // a device is a block device everywhere else (resources' devices)
	// --backend names what --dry-run would silently replace.
	c.MarkFlagsMutuallyExclusive("dry-run", "backend")
	return c
}

// runAgent runs until ctx ends (SIGTERM, SIGINT); hup delivers SIGHUP.
// It is one function because its defers are the agent's teardown in the
// reverse order of its start-up (the backend last, so no throttle
// outlives the agent's other parts); split, the order would be spread
// over several functions.
func runAgent(ctx context.Context, hup <-chan os.Signal, cfg *config.Config, cfgPath string, bo backendOptions, socket, httpAddr string, override func(*config.Config), eo etcdOptions, log *slog.Logger) error {
	if ctx.Err() != nil {
		log.Info("agent stopped before it started")
		return nil
	}
	t, err := newBackend(bo, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := t.Close(); err != nil {
			log.Error("cleanup", "err", err)
		}
	}()
	qa := enableQuickAck(bo, log)
	defer func() {
		if err := qa.Restore(); err != nil {
			log.Error("cleanup", "err", err)
		}
	}()
	l, err := agent.ListenUnix(socket)
	if err != nil {
		return err
	}
	defer os.Remove(socket)
	api := &agent.API{T: t, Log: log}
	done := make(chan error, 1)
	if cfg != nil {
		sampler, disc, rates, b, err := agentInputs(cfg, log)
		if err != nil {
			return err
		}
		if b != nil {
			defer b.Close(log)
		}
		// With --etcd every resource's controller goes through the cluster
		// (cmd/sanqos/cluster.go); the agent itself is unchanged.
		newCtrl, load, register := newPID, config.Load, func(*http.ServeMux) {}
		var cl *clusterRun
		if eo.Endpoints != "" {
			if cl, err = startCluster(eo, cfg, log); err != nil {
				return err
			}
			defer cl.Close()
			newCtrl, load, register = cl.newController, cl.load, cl.register
		}
		deps := agent.Deps{Throttle: t, Sampler: sampler, Rates: rates, Discoverer: disc, Log: log,
			NewController: newCtrl, NewSmoother: newEWMA, ControlAPI: api.Handler()}
		if b == nil {
			// A reload rebuilds target mode's discovery from the new
			// config; bridge mode's is its capture, which needs a restart.
			deps.NewDiscoverer = newDiscoverer
		}
		a := agent.New(cfg, deps)
		api.Status, api.Events = func() any { return a.Status() }, a.Events
		dash := dashboard.New(a.Status, dashboard.Options{Events: a.Events})
		go dash.Run(ctx)
		if err := a.ServeHTTP(ctx, cfg.HTTP, func(mux *http.ServeMux) { dash.Register(mux); register(mux) }); err != nil {
			return err
		}
		reload := agentReload(a, cfg, bo.DryRun, override)
		if cl != nil {
			go cl.feedDetails(ctx, a, cfg.Interval)
			go cl.watchPolicy(ctx, cfgPath, func(nc *config.Config) error {
				err := reload(nc)
				a.RecordReload(err)
				if err != nil {
					return err
				}
				log.Info("cluster policy applied", "resources", len(nc.Resources))
				return nil
			})
		}
		rl := &reloader{path: cfgPath, load: load, apply: reload, a: a, cl: cl, log: log}
		api.Reload = func() (agent.ReloadReply, error) { return rl.reload("api") }
		go func() {
			for range hup {
				rl.reload("SIGHUP")
			}
		}()
		go func() { done <- a.Run(ctx) }()
	} else if err := runManualOnly(ctx, hup, t, api, httpAddr, done, log); err != nil {
		return err
	}
	srv := &http.Server{Handler: api.Handler()}
	go func() { <-ctx.Done(); srv.Close() }()
	if bo.DryRun {
		log.Info("dry run: the agent decides and applies nothing (--dry-run)")
	}
	log.Info("agent running", "backend", t.Name(), "socket", socket, "config", cfgPath)
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	err = <-done
	log.Info("agent stopping: removing throttles")
	return err
}

// agentInputs are a configured agent's measurements: in target mode the
// devices' waits (/proc/diskstats), the target's discovery and its
// connections' rates; in bridge mode the wire gives the read wait, the
// consumers and their rates (passive, capture), from b, which the caller
// closes.
func agentInputs(cfg *config.Config, log *slog.Logger) (sampler agent.Sampler, disc agent.Discoverer, rates agent.RateSampler, b *bridgeInputs, err error) {
	if cfg.Mode == "bridge" {
		// No target to ask.
		if b, err = startBridge(cfg, log); err != nil {
			return nil, nil, nil, nil, err
		}
		return b.meter, b, nil, b, nil
	}
	ds, err := sample.NewDiskstats("/proc", "/sys")
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if disc, err = newDiscoverer(cfg); err != nil {
		return nil, nil, nil, nil, err
	}
	// The target's own connections give per-consumer rates.
	return ds, disc, sample.NewTCPRates(cfg.TCPPorts()...), nil, nil
}

// agentReload is SIGHUP's and the cluster policy's way in to a: the
// flags that override config keys (override; --http's listener among
// them, or every reload would look like a listener change) survive it,
// and bridge mode refuses portal changes. cfg is the config a started
// with.
func agentReload(a *agent.Agent, cfg *config.Config, dryRun bool, override func(*config.Config)) func(*config.Config) error {
	return func(nc *config.Config) error {
		if override != nil {
			override(nc)
		}
		if dryRun {
			// The file's backend is not what runs: editing it is no
			// backend change, and needs no restart.
			nc.Backend = cfg.Backend
		}
		if cfg.Mode == "bridge" && !samePortals(cfg, nc) {
			return errors.New("bridge mode: resources, portals, protocol and capture_interface changes need a restart")
		}
		return a.Reload(nc)
	}
}

// reloader re-reads the config file and has the agent apply or refuse
// it, for SIGHUP and the control API's POST /v1/reload (sanqos reload,
// the unit's ExecReload) alike: one reload at a time, each logged and
// counted in the reload metrics. With a cluster (cl), the cluster learns
// what was applied.
type reloader struct {
	mu    sync.Mutex
	path  string
	load  func(string) (*config.Config, error)
	apply func(*config.Config) error
	a     *agent.Agent
	cl    *clusterRun
	log   *slog.Logger
}

// reload is one reload asked for by via ("SIGHUP", "api"): the agent's
// verdict, nil when applied.
func (r *reloader) reload(via string) (agent.ReloadReply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	nc, err := r.load(r.path)
	if err != nil {
		err = fmt.Errorf("%s does not load (the running config stays): %w", r.path, err)
	} else {
		err = r.apply(nc)
	}
	r.a.RecordReload(err)
	if err != nil {
		r.log.Error("config reload rejected; the old config stays active", "via", via, "err", err)
		return agent.ReloadReply{}, err
	}
	if r.cl != nil {
		r.cl.applied(nc)
	}
	rep := agent.ReloadReply{Resources: len(nc.Resources), Unmapped: r.a.Unmapped()}
	r.log.Info("config reloaded", "via", via, "resources", len(nc.Resources), "unmapped", len(rep.Unmapped))
	return rep, nil
}

// runManualOnly is the agent without --config: it serves manual throttles
// until ctx ends (then done gets nil) and answers SIGHUP with a log line.
// With httpAddr an agent with no resources, never run, still serves the
// dashboard (the consumers table) and the backend's metrics.
func runManualOnly(ctx context.Context, hup <-chan os.Signal, t throttle.Throttle, api *agent.API, httpAddr string, done chan<- error, log *slog.Logger) error {
	if httpAddr != "" {
		def := config.Defaults()
		a := agent.New(&def, agent.Deps{Throttle: t, Log: log, NewController: newPID, NewSmoother: newEWMA})
		api.Status = func() any { return a.Status() }
		dash := dashboard.New(a.Status, dashboard.Options{})
		go dash.Run(ctx)
		if err := a.ServeHTTP(ctx, httpAddr, dash.Register); err != nil {
			return err
		}
	}
	go func() { <-ctx.Done(); done <- nil }()
	go func() {
		for range hup {
			log.Info("SIGHUP: no config to reload (started without --config)")
		}
	}()
	return nil
}

func newPID(cfg *config.Config, r config.Resource) agent.Controller { return agent.NewPID(cfg, r) }

func newEWMA(alpha float64) agent.Smoother { return agent.NewEWMA(alpha) }

// enableQuickAck sets the quickack route metric where a delay backend
// holds the target's replies (target mode, write_delay_on replies): a
// shadow agent, bridge mode, an HTB-only backend or quick_ack: false
// leave the routes alone, and so does a failure (logged: the throttle
// works without it, the writers only probe more).
func enableQuickAck(o backendOptions, log *slog.Logger) *throttle.QuickAck {
	if w, err := throttle.ParseWriteOn(o.WriteOn); err != nil || w != throttle.WriteOnReplies {
		return nil
	}
	if !o.QuickAck || o.DryRun || o.Chain == "FORWARD" {
		return nil
	}
	if b, ok := throttle.Lookup(o.Name); ok && (!b.Caps.Delay || b.Parts == 0) {
		return nil // rate caps alone hold no reply; dry-run touches nothing
	}
	dev, err := o.ConsumerDevice()
	if err != nil {
		log.Warn("quickack not set: no consumers' interface", "err", err)
		return nil
	}
	q, err := throttle.EnableQuickAck(dev, log)
	if err != nil {
		log.Warn("quickack not set", "err", err)
		return nil
	}
	return q
}

// newBackend checks the flags' ranges, then has the throttle registry
// build the backend.
func newBackend(o backendOptions, log *slog.Logger) (throttle.Throttle, error) {
	if o.Port < 1 || o.Port > 65535 {
		return nil, fmt.Errorf("iscsi-port %d out of range", o.Port)
	}
	if len(o.Ports) == 0 { // no config
		o.Ports = []uint16{uint16(o.Port)}
	}
	if o.QueueLimit < 0 || o.QueueLimit > 1<<20 {
		return nil, fmt.Errorf("queue-limit %d: want 0 (default) to %d", o.QueueLimit, 1<<20)
	}
	o.Log = log
	return throttle.New(o.Name, o.Options)
}
