package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/cluster"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/internal/cli"
	"github.com/sanqos/sanqos/throttle"
)

// Bad backend options are refused before anything touches the kernel.
func TestNewBackendRefusesBadOptions(t *testing.T) {
	for _, c := range []struct {
		o    backendOptions
		want string
	}{
		{backendOptions{Name: "delayline", Port: 0}, "iscsi-port"},
		{backendOptions{Name: "delayline", Port: 3260, Options: throttle.Options{QueueLimit: -1}}, "queue-limit"},
		{backendOptions{Name: "delayline", Port: 3260, Options: throttle.Options{WriteOn: "data"}}, "write_delay_on"},
	} {
		if _, err := newBackend(c.o, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want one naming %s", c.o, err, c.want)
		}
	}
}

// The config decides the backend; without one the delay line follows each
// sender's srtt unless a flag says otherwise.
func TestBackendOptionsResolve(t *testing.T) {
	def := backendOptions{Name: "auto", Port: 3260, Options: throttle.Options{Chain: "OUTPUT"}}
	withFollow := func(on bool) *config.Config {
		c := config.Defaults()
		c.DelayFollow = on
		return &c
	}
	acks := def
	acks.WriteOn = "acks"
	withWriteOn := func(w string) *config.Config {
		c := config.Defaults()
		c.WriteDelayOn = w
		return &c
	}
	bridge := config.Defaults()
	bridge.Mode, bridge.Backend, bridge.Device = "bridge", "delayline", "br0"
	for _, c := range []struct {
		name    string
		o       backendOptions
		cfg     *config.Config
		flagSet bool
		follow  bool
		chain   string
		backend string
		device  string
		writeOn string
	}{
		{name: "manual, replies: no cap needed", o: def, chain: "OUTPUT", backend: "auto"},
		{name: "manual, acks: follows", o: acks, follow: true, chain: "OUTPUT", backend: "auto", writeOn: "acks"},
		{name: "config: its write_delay_on", o: acks, cfg: withWriteOn("replies"), chain: "OUTPUT", backend: "auto", writeOn: "replies"},
		{name: "manual, acks, --delay-follow=false", o: acks, flagSet: true, chain: "OUTPUT", backend: "auto", writeOn: "acks"},
		{name: "config: its delay_follow (off)", o: def, cfg: withFollow(false), chain: "OUTPUT", backend: "auto", writeOn: "replies"},
		{name: "config: its delay_follow (on)", o: def, cfg: withFollow(true), follow: true, chain: "OUTPUT", backend: "auto", writeOn: "replies"},
		{name: "the config replaces the flags' defaults", o: backendOptions{Name: "htb", Options: throttle.Options{Follow: true, Chain: "OUTPUT"}}, cfg: withFollow(false), chain: "OUTPUT", backend: "auto", writeOn: "replies"},
		{name: "bridge mode", o: def, cfg: &bridge, chain: "FORWARD", backend: "delayline", device: "br0", writeOn: "replies"},
	} {
		got := c.o.resolve(c.cfg, c.flagSet)
		if got.Follow != c.follow || got.Chain != c.chain || got.Name != c.backend || got.Device != c.device || got.WriteOn != c.writeOn {
			t.Errorf("%s: %+v", c.name, got)
		}
		// The netem tree spans the controller's range: a config's
		// max_delay and step; manual throttles keep netem's own.
		if c.cfg != nil && (got.MaxDelay != c.cfg.MaxDelay || got.Step != c.cfg.DelayStep) || c.cfg == nil && (got.MaxDelay != 0 || got.Step != 0) {
			t.Errorf("%s: netem range %v in %v steps", c.name, got.MaxDelay, got.Step)
		}
		// The guard checks the kernel objects every control tick; manual
		// throttles take the backend's default.
		if c.cfg != nil && got.Check != c.cfg.Interval || c.cfg == nil && got.Check != 0 {
			t.Errorf("%s: kernel objects checked every %v", c.name, got.Check)
		}
	}
}

// The cluster's bounds on a lost shared step are checked before the agent
// starts; the defaults pass.
func TestEtcdBoundsValidated(t *testing.T) {
	def := etcdOptions{Fresh: cluster.DefaultFresh, Decay: cluster.DefaultDecay}
	if err := def.validate(); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	for _, o := range []etcdOptions{
		{Fresh: 0, Decay: cluster.DefaultDecay},
		{Fresh: 2 * time.Second, Decay: cluster.DefaultDecay},
		{Fresh: cluster.DefaultFresh, Decay: 0},
		{Fresh: cluster.DefaultFresh, Decay: time.Hour},
	} {
		if o.validate() == nil {
			t.Errorf("accepted fresh %v decay %v", o.Fresh, o.Decay)
		}
	}
}

// --dry-run puts the dry-run backend under the agent whatever the config
// or --backend names, and newBackend builds it as the recording throttle
// (throttle.Memory, which only keeps a map: TestDryRunAgentChangesNothing
// runs the whole agent with it).
func TestDryRunFlag(t *testing.T) {
	named := config.Defaults()
	named.Backend = "delayline"
	o := backendOptions{Name: "netem", DryRun: true, Port: 3260, Options: throttle.Options{Chain: "OUTPUT", WriteOn: "replies"}}
	for _, cfg := range []*config.Config{nil, &named} {
		got := o.resolve(cfg, false)
		if got.Name != dryRunBackend {
			t.Fatalf("config %v: backend %q, want %q", cfg != nil, got.Name, dryRunBackend)
		}
		th, err := newBackend(got, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := th.(*throttle.Memory); !ok || th.Name() != dryRunBackend {
			t.Errorf("config %v: built %T %q, want the recording throttle", cfg != nil, th, th.Name())
		}
	}
	for _, cfg := range []*config.Config{nil, &named} {
		if got := (backendOptions{Name: "delayline", NoReinstall: true}).resolve(cfg, false); got.Check >= 0 {
			t.Errorf("config %v: --no-reinstall left the guard checking every %v", cfg != nil, got.Check)
		}
	}
	if got := (backendOptions{Name: "auto"}).resolve(&named, false); got.Name != "delayline" {
		t.Errorf("without --dry-run the config's backend runs: got %q", got.Name)
	}
	if f := agentCmd().Flags().Lookup("dry-run"); f == nil || f.Value.Type() != "bool" {
		t.Fatalf("agent has no boolean --dry-run: %v", f)
	}
	// Refused before anything starts: --backend names what --dry-run replaces.
	_, err := run(t, "agent", "--dry-run", "--backend", "netem")
	if err == nil || cli.ExitCode(err) != cli.ExitUsage {
		t.Errorf("--dry-run --backend netem: %v (exit %d), want a usage error", err, cli.ExitCode(err))
	}
}

// A flag given on the command line wins over the config's key, at start
// and at every reload: --backend netem beside a config naming delayline
// runs netem (it used to run delayline, silently). Flags not given leave
// the config's keys alone, and the keys replaced are listed for the log.
func TestFlagsOverrideConfig(t *testing.T) {
	file := func() *config.Config {
		c := config.Defaults()
		c.Backend, c.Ports, c.Device, c.WriteDelayOn, c.QuickAck, c.HTTP = "delayline", []int{3260, 4420}, "eth1", "replies", true, "127.0.0.1:9100"
		return &c
	}
	flags := backendOptions{Name: "netem", QuickAck: false, Port: 3261, Options: throttle.Options{Device: "eth0", Chain: "OUTPUT", WriteOn: "acks"}}
	values := agentFlagValues{flags, "127.0.0.1:9200"}
	for _, tc := range []struct {
		name    string
		given   []string
		backend string
		ports   []uint16
		device  string
		writeOn string
		qa      bool
		http    string
		keys    string
	}{
		{"none given", nil, "delayline", []uint16{3260, 4420}, "eth1", "replies", true, "127.0.0.1:9100", ""},
		{"--backend", []string{"backend"}, "netem", []uint16{3260, 4420}, "eth1", "replies", true, "127.0.0.1:9100", "backend"},
		{"--interface and --iscsi-port", []string{"interface", "iscsi-port"}, "delayline", []uint16{3261}, "eth0", "replies", true, "127.0.0.1:9100", "iscsi_port,device"},
		{"--device (old name)", []string{"device"}, "delayline", []uint16{3260, 4420}, "eth0", "replies", true, "127.0.0.1:9100", "device"},
		{"--write-delay-on, --quick-ack", []string{"write-delay-on", "quick-ack"}, "delayline", []uint16{3260, 4420}, "eth1", "acks", false, "127.0.0.1:9100", "write_delay_on,quick_ack"},
		{"--http", []string{"http"}, "delayline", []uint16{3260, 4420}, "eth1", "replies", true, "127.0.0.1:9200", "http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed := func(f string) bool { return slices.Contains(tc.given, f) }
			override, keys := overrideConfig(changed, values)
			if got := strings.Join(keys, ","); got != tc.keys {
				t.Errorf("keys replaced %q, want %q", got, tc.keys)
			}
			// At start, and again on a reloaded file (a new *Config).
			for _, when := range []string{"start", "reload"} {
				cfg := file()
				override(cfg)
				got := flags.resolve(cfg, changed("delay-follow"))
				if got.Name != tc.backend || !slices.Equal(got.Ports, tc.ports) || got.Device != tc.device || got.WriteOn != tc.writeOn || got.QuickAck != tc.qa {
					t.Errorf("%s: %+v", when, got)
				}
				if cfg.HTTP != tc.http {
					t.Errorf("%s: listener %q, want %q", when, cfg.HTTP, tc.http)
				}
				if !slices.Equal(cfg.TCPPorts(), got.Ports) || cfg.Backend != got.Name {
					t.Errorf("%s: the config (discovery, rates, reload checks) says ports %v backend %s, the backend runs %v %s", when, cfg.TCPPorts(), cfg.Backend, got.Ports, got.Name)
				}
			}
		})
	}
	override, _ := overrideConfig(func(string) bool { return true }, values)
	override(nil) // no config: nothing to do
	// Every flag in the table is one of the agent's.
	fs := agentCmd().Flags()
	for _, f := range agentConfigFlags {
		if fs.Lookup(f.flag) == nil {
			t.Errorf("the agent has no --%s", f.flag)
		}
	}
}
