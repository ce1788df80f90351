package doctor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sanqos/sanqos/config"
)

// configCheck loads the config with config.Load, as the agent does at
// start, so a config the agent would refuse fails here with the same
// messages (every field and line), and checks the devices it names
// against the host's /proc/diskstats. Its warnings fail it under --strict.
func (e *Env) configCheck() Result {
	switch {
	case e.ConfigPath == "":
		return Result{Status: OK, Summary: "no --config: checked as 'sanqos agent' without one (manual throttles only, backend auto, no discovery)",
			Detail: []string{"give --config FILE to check the agent as it would run with that file"}}
	case e.ConfigErr != nil:
		return Result{Status: Fail, Summary: "the agent would refuse this config; the other checks use the defaults",
			Detail: strings.Split(e.ConfigErr.Error(), "\n")}
	}
	cfg := *e.Config // the device check adds warnings: to a copy, so Run can run again
	cfg.Warnings = slices.Clone(cfg.Warnings)
	if err := cfg.CheckDevices(config.Diskstats(e.Host.path("/proc"))); err != nil {
		cfg.Warnings = append(cfg.Warnings, fmt.Sprintf("devices not checked against /proc/diskstats: %v", err))
	}
	warnings := cfg.Warnings
	r := Result{Status: OK, Summary: fmt.Sprintf("%s: valid (mode %s, backend %s, discovery %s, %d resources)",
		e.ConfigPath, cfg.Mode, cfg.Backend, cfg.Discovery.Source, len(cfg.Resources))}
	for _, w := range warnings {
		r.Detail = append(r.Detail, "warning: "+w)
	}
	switch {
	case len(warnings) > 0 && e.Strict:
		r.Status = Fail
		r.Summary += fmt.Sprintf("; %d warnings, refused by --strict", len(warnings))
	case len(warnings) > 0:
		r.Status = Warn
		r.Summary += fmt.Sprintf("; %d warnings", len(warnings))
	}
	return r
}
