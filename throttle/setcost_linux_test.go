package throttle

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/sanqos/sanqos/internal/testenv"
)

// What one control tick costs the agent in each tc backend, on this
// machine's real CPU: twelve writers (the lab's autonomic load) all moved
// to a new delay, which is what a tick that changes the controller's
// output sends (agent/loop.go apply: only changed consumers are sent).
// Under the TCG guest, where these backends run end to end, an emulated
// core is several times slower, so these are the figures to add to the
// control loop's own CPU (the shadow agent's control_loop_cpu_pct) for a
// real-CPU estimate of the whole agent.
//
//	sudo go test ./throttle -run '^$' -bench 'SetTick' -benchtime 2000x

const setCostWriters = 12

func setCostBatches() [2]map[netip.Addr]Setting {
	var b [2]map[netip.Addr]Setting
	for i := range b {
		b[i] = map[netip.Addr]Setting{}
		for w := range setCostWriters {
			a := netip.AddrFrom4([4]byte{10, 201, 1, byte(10 + w)})
			b[i][a] = Setting{WriteDelay: time.Duration(15+i) * time.Millisecond}
		}
	}
	return b
}

// BenchmarkEDTSetTick: per tick, twelve BPF hash-map updates and the
// heartbeat. This kernel has no fq, so the program is not attached: Set's
// work is all in the maps, which is the whole of its userspace cost.
func BenchmarkEDTSetTick(b *testing.B) {
	testenv.RequireRoot(b)
	e := &EDT{cfg: EDTConfig{tcConfig: tcConfig{TTL: DefaultMarkTTL, Log: slog.New(slog.DiscardHandler)}}, cur: map[netip.Addr]Setting{}}
	var err error
	if e.consumers, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 16, MaxEntries: 65536}); err != nil {
		b.Fatal(err)
	}
	if e.lease, err = newBPFLease(e.cfg.TTL, e.cfg.Log, "edt delays"); err != nil {
		b.Fatal(err)
	}
	defer e.bpfObjects.close()
	setTicks(b, e)
}

// BenchmarkNetemSetTick: per tick, one skbinfo ipset add per writer (its
// entry's mark replaced) in a scratch namespace, over the backend's one
// netlink socket. The tc half (qdiscs) is untouched by Set, so this
// kernel's missing netem does not matter.
func BenchmarkNetemSetTick(b *testing.B) { benchNetemSet(b, true) }

// BenchmarkNetemSetTickSocketPerMessage: the same with a socket opened and
// closed per message, as the library's package-level calls do: the
// baseline for the shared socket.
func BenchmarkNetemSetTickSocketPerMessage(b *testing.B) { benchNetemSet(b, false) }

func benchNetemSet(b *testing.B, shared bool) {
	n := newTCTestNet(b)
	n.enterA(b)
	ne, undo := markingNetem(b, NetemConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}, Log: slog.New(slog.DiscardHandler)}, MaxDelay: 40 * time.Millisecond})
	defer undo()
	if !shared {
		ne.ipset.close()
		ne.ipset = nil
	}
	setTicks(b, ne)
}

// setTicks moves the writers between two delays b.N times and reports
// the tick's cost as a share of one core at the agent's 10 ticks per
// second, had every tick changed every writer.
func setTicks(b *testing.B, t Throttle) {
	batches := setCostBatches()
	b.ResetTimer()
	for i := range b.N {
		if err := t.Set(batches[i%2]); err != nil {
			b.Fatal(err)
		}
	}
	perTick := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(perTick*10*100, "%core@10Hz")
	b.ReportMetric(perTick*1e6/setCostWriters, "µs/writer")
}
