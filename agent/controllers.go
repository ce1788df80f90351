package agent

import (
	"fmt"

	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/control"
	"github.com/sanqos/sanqos/filter"
)

// NewPID is the controller the agent runs for a configured resource: the
// thesis' PID with the config's gains. It lives here, not in cmd, so the
// simulator and the tuner build exactly the daemon's controller.
func NewPID(cfg *config.Config, r config.Resource) Controller {
	p, err := control.NewPID(control.PIDConfig{
		Threshold: float64(r.Threshold) / 1e6, Kp: cfg.PID.Kp, Interval: cfg.Interval, Ti: cfg.PID.Ti, Td: cfg.PID.Td,
		MaxSteps: int(cfg.MaxDelay/cfg.DelayStep) + cfg.RateLeverSteps, Step: cfg.DelayStep, ReleaseBand: 0.25, ReleaseFactor: 0.5, ReleaseAfter: 3,
	})
	if err != nil {
		panic(fmt.Sprintf("config validation let through a bad PID: %v", err)) // config.validate checks the same bounds
	}
	return p
}

// NewEWMA is the smoother of indicators and consumer rates.
func NewEWMA(alpha float64) Smoother {
	e, err := filter.NewEWMA(alpha)
	if err != nil {
		panic(fmt.Sprintf("config validation let through a bad alpha: %v", err))
	}
	return e
}
