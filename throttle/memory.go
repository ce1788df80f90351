package throttle

import (
	"net/netip"
	"sync"
)

func init() {
	Register(Entry{Name: "dry-run", Rank: 100, About: "records settings, touches nothing (tests, shadow agents)",
		Caps:  Caps{Delay: true, Rate: true, WriteRate: true, IPv6: true},
		Needs: func(WriteOn) [][]Feature { return nil },
		Probe: func() (bool, string, error) { return true, "needs nothing of the kernel", nil },
		Build: func(Options, WriteOn) (Throttle, error) { return NewMemory(), nil }})
}

// Memory is a Throttle that only records settings. It is the backend of
// `--backend dry-run` and of the simulator, where the model (not the
// kernel) turns settings into delays.
type Memory struct {
	mu sync.Mutex
	m  map[netip.Addr]Setting
}

// NewMemory returns an empty recording throttle.
func NewMemory() *Memory { return &Memory{m: map[netip.Addr]Setting{}} }

func (t *Memory) Name() string { return "dry-run" }

// Get returns one consumer's setting without copying the whole map (the
// simulator asks for every request it starts).
func (t *Memory) Get(a netip.Addr) Setting {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[a]
}

func (t *Memory) Set(settings map[netip.Addr]Setting) error {
	if err := ValidateAll(settings); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for a, s := range settings {
		if s.IsZero() {
			delete(t.m, a)
		} else {
			t.m[a] = s
		}
	}
	return nil
}

func (t *Memory) List() map[netip.Addr]Setting {
	return listed(&t.mu, t.m, func(s Setting) Setting { return s })
}

func (t *Memory) Close() error { return Clear(t) }
