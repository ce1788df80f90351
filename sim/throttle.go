package sim

import (
	"net/netip"
	"sync"

	"github.com/sanqos/sanqos/throttle"
)

// Throttle is the simulator's throttle.Throttle: the dry-run backend's
// record of settings, which the TCP model reads for every request it
// starts, plus counts of the actuator's calls.
type Throttle struct {
	*throttle.Memory
	mu sync.Mutex
	// Sets counts Set calls and Changed the consumers they changed, for
	// the scale scenario's actuation cost.
	Sets, Changed int
}

// NewThrottle returns an empty recording throttle.
func NewThrottle() *Throttle { return &Throttle{Memory: throttle.NewMemory()} }

func (t *Throttle) get(a netip.Addr) throttle.Setting { return t.Memory.Get(a) }

// Name implements throttle.Throttle.
func (t *Throttle) Name() string { return "sim" }

// Set implements throttle.Throttle (all-or-nothing, validated like the
// real backends).
func (t *Throttle) Set(s map[netip.Addr]throttle.Setting) error {
	if err := t.Memory.Set(s); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Sets++
	t.Changed += len(s)
	return nil
}

// SetDirect applies a fixed setting (open-loop scenarios, no agent).
func (t *Throttle) SetDirect(a netip.Addr, s throttle.Setting) {
	_ = t.Set(map[netip.Addr]throttle.Setting{a: s})
}
