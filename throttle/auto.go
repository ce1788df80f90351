package throttle

import (
	"fmt"
	"log/slog"
)

// Auto returns the netem backend when the kernel has netem, else the
// delay line that delayLine builds (its constructor lives with the delay
// line, so its configuration stays there), and logs which one it chose and
// why. A kernel with netem whose tree cannot be built is an error, not a
// silent fallback: the operator asked for the production method and should
// learn why it is not running.
func Auto(cfg NetemConfig, delayLine func() (Throttle, error)) (Throttle, error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	ok, err := NetemAvailable()
	if err != nil {
		// The probe itself failed (no netns or veth): we cannot tell, so
		// take the backend that works on any kernel.
		log.Warn("netem probe failed; using the delay line", "err", err)
		ok = false
	}
	if ok {
		t, err := NewNetem(cfg)
		if err != nil {
			return nil, fmt.Errorf("auto: kernel has netem but the netem backend failed: %w", err)
		}
		log.Info("throttle backend chosen", "backend", "netem", "reason", "kernel has netem")
		return t, nil
	}
	t, err := delayLine()
	if err != nil {
		return nil, fmt.Errorf("auto: no netem in this kernel, and the delay line failed: %w", err)
	}
	log.Info("throttle backend chosen", "backend", t.Name(), "reason", "kernel has no netem (CONFIG_NET_SCH_NETEM)")
	return t, nil
}
