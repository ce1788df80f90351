package doctor

import (
	"fmt"
	"strings"
)

// configCheck loads the config with config.Load, as the agent does at
// start, so a config the agent would refuse fails here with the same
// messages (every field and line).
type configCheck struct{ e *Env }

func (configCheck) Name() string { return "config" }

func (c configCheck) Run() Result {
	e := c.e
	switch {
	case e.ConfigPath == "":
		return Result{Status: OK, Summary: "no --config: checked as 'sanqos agent' without one (manual throttles only, backend auto, no discovery)",
			Detail: []string{"give --config FILE to check the agent as it would run with that file"}}
	case e.ConfigErr != nil:
		return Result{Status: Fail, Summary: "the agent would refuse this config; the other checks use the defaults",
			Detail: strings.Split(e.ConfigErr.Error(), "\n")}
	}
	cfg := e.Config
	r := Result{Status: OK, Summary: fmt.Sprintf("%s: valid (mode %s, backend %s, discovery %s, %d resources)",
		e.ConfigPath, cfg.Mode, cfg.Backend, cfg.Discovery.Source, len(cfg.Resources))}
	for _, w := range cfg.Warnings {
		r.Status = Warn
		r.Detail = append(r.Detail, "warning: "+w)
	}
	if r.Status == Warn {
		r.Summary += fmt.Sprintf("; %d warnings", len(cfg.Warnings))
	}
	return r
}
