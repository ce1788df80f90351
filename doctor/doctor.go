// Package doctor is sanqos' preflight: it tells an operator, before the
// agent starts, whether the agent could run on this host with a given
// config, and if not, why and what to do. It looks at the kernel's
// features, netfilter, the NFQUEUE number, capabilities, the target
// software and what discovery would find, the interface to throttle on,
// the listeners the agent would open, and which backend `auto` would pick.
//
// Doctor must not change any kernel state: no namespaces (not even the
// scratch ones throttle's probes use), qdiscs, links, rules, sets, queue
// bindings or BPF objects, and no files. It reads /proc, /sys, the kernel
// config and the config file, and runs only programs that print (`iptables
// -V`, `iptables-save`, `nft list tables`, `ipset list -n`, `tgtadm --op
// show`). Where the agent decides by building something (throttle.New("auto"
// probes in a scratch namespace), doctor predicts the decision from the
// kernel config instead, and says so. The tests hold it to this: they
// compare the host's namespaces, qdiscs, rules and sets before and after a
// run, and trace the system calls that would create state.
//
// With a window (sanqos doctor --window) it also samples /proc/diskstats
// for that long and suggests a threshold (threshold.go).
//
// Each concern is one Check (a name and a Run that returns a Result),
// registered in Checks; cmd/sanqos/doctor.go runs them and prints a table
// or JSON.
//
// Imports (sanqos): agent, config, discover, internal/quantile, sample, throttle.
package doctor

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sanqos/sanqos/config"
)

// Status is a check's verdict.
type Status int

const (
	// OK: nothing to do.
	OK Status = iota
	// Warn: the agent would run, but not as well as it could (a fallback
	// backend, discovery that finds nothing yet, a stale rule).
	Warn
	// Fail: the agent would not start, or could not throttle anyone.
	Fail
)

func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case Warn:
		return "warn"
	}
	return "fail"
}

// MarshalJSON writes the status as its word, for scripts.
func (s Status) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// Result is what one check found.
type Result struct {
	Status  Status   `json:"status"`
	Summary string   `json:"summary"`
	Detail  []string `json:"detail,omitempty"`
}

// Check is one concern of the preflight. Run must only read (see the
// package doc).
type Check struct {
	Name string
	Run  func() Result
}

// Named is a Result with its check's name.
type Named struct {
	Name string `json:"name"`
	Result
}

// Report is a whole run.
type Report struct {
	// Config is the config file checked; "" when none was given.
	Config string `json:"config"`
	// OK is false when a check failed: the agent could not run.
	OK      bool    `json:"ok"`
	Results []Named `json:"checks"`
}

// Failed names the checks that failed.
func (r Report) Failed() []string {
	var out []string
	for _, n := range r.Results {
		if n.Status == Fail {
			out = append(out, n.Name)
		}
	}
	return out
}

// Checks is the registry: every check, in the order a reader wants them
// (the config first, since the others read it; the verdict on the backend
// after the facts it rests on).
func Checks(e *Env) []Check {
	cs := []Check{
		{"config", e.configCheck},
		{"kernel", e.kernelCheck},
		{"capabilities", e.capsCheck},
		{"netfilter", e.netfilterCheck},
		{"nfqueue", e.nfqueueCheck},
		{"interfaces", e.interfacesCheck},
		{"backend", e.backendCheck},
		{"listeners", e.listenersCheck},
		{"target", e.targetCheck},
		{"discovery", e.discoveryCheck},
	}
	if e.Window > 0 { // only when asked: it takes the whole window
		cs = append(cs, Check{"threshold", e.thresholdCheck})
	}
	return cs
}

// Run runs checks in order. A check that panics fails with the panic's
// value rather than taking the report with it: a preflight that crashes
// on an odd host tells the operator nothing.
func Run(e *Env, checks []Check) Report {
	rep := Report{Config: e.ConfigPath, OK: true}
	for _, c := range checks {
		r := runOne(c)
		if r.Status == Fail {
			rep.OK = false
		}
		rep.Results = append(rep.Results, Named{Name: c.Name, Result: r})
	}
	return rep
}

func runOne(c Check) (r Result) {
	defer func() {
		if p := recover(); p != nil {
			r = Result{Status: Fail, Summary: fmt.Sprintf("check crashed: %v", p)}
		}
	}()
	return c.Run()
}

// Env is what the checks share: the host they look at, the config the
// agent would run with, and facts more than one check needs, gathered
// once. Not safe for concurrent use (Run is sequential).
type Env struct {
	Host Host
	// Config is the agent's config: the file's, or config.Defaults() when
	// there is none or it is invalid.
	Config *config.Config
	// ConfigPath is the --config file ("" for none); ConfigErr why it
	// did not load.
	ConfigPath string
	ConfigErr  error
	// Window is how long the threshold check samples diskstats (0: the
	// check is not run); Disk its sampler (nil: this host's).
	Window time.Duration
	Disk   DiskSeries
	// Strict makes the config's warnings fail its check (--strict).
	Strict bool

	kernel   *kernelFacts
	caps     *capFacts
	ipt      *iptFacts
	planned  *plan
	linkList *linkFacts
}

// NewEnv loads path (none when "") the way the agent does, so an invalid
// config fails here with the agent's message.
func NewEnv(h Host, path string) *Env {
	e := &Env{Host: h, ConfigPath: path}
	if path != "" {
		e.Config, e.ConfigErr = config.Load(path)
	}
	if e.Config == nil {
		def := config.Defaults()
		e.Config = &def
	}
	return e
}

// backendName is the backend the agent would be asked for: the config's,
// or the agent's flag default without a config.
func (e *Env) backendName() string {
	if e.ConfigPath == "" || e.Config.Backend == "" {
		return "auto"
	}
	return e.Config.Backend
}

// configured reports whether the agent would run with a config (and so
// discover, sample and control), not only serve manual throttles.
func (e *Env) configured() bool { return e.ConfigPath != "" && e.ConfigErr == nil }
