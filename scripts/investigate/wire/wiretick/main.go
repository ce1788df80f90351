// Command wiretick samples, every 100 ms as the agent's tick does and in
// its order (diskstats, then TCP_INFO on the target's port), the lab's
// loop devices and each peer's wire bytes, and prints one JSON line per
// tick: when each sample was taken and what moved. Run it in the
// target's namespace (ip netns exec bm wiretick -for 60s); its output
// shows whether a consumer's wire rate, as the agent computes and smooths
// it, follows the bytes its device moved (scripts/investigate/wire/wiretick.py).
//
// Imports (sanqos): sample.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sanqos/sanqos/sample"
)

type dev struct {
	Reads, ReadSectors, Writes, WriteSectors uint64
}

type peer struct {
	ReadBytes, WriteBytes uint64
	ReadBps, WriteBps     float64
}

type tick struct {
	Tick, Disk, Wire time.Time // ticker, diskstats' read, after the TCP_INFO sample
	Devs             map[string]dev
	Peers            map[string]peer
}

func main() {
	port := flag.Int("port", 3260, "the target's port")
	dur := flag.Duration("for", time.Minute, "how long")
	devs := flag.String("devices", "loop0,loop1,loop2,loop3", "devices")
	flag.Parse()
	d, err := sample.NewDiskstats("/proc", "/sys")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tr := sample.NewTCPRates(uint16(*port))
	names := strings.Split(*devs, ",")
	enc := json.NewEncoder(os.Stdout)
	tk := time.NewTicker(100 * time.Millisecond)
	end := time.Now().Add(*dur)
	for now := range tk.C {
		if now.After(end) {
			return
		}
		m, err := d.Read(names...)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		t := tick{Tick: now, Devs: map[string]dev{}, Peers: map[string]peer{}}
		for n, c := range m {
			t.Disk = c.Time
			t.Devs[n] = dev{c.Reads, c.ReadSectors, c.Writes, c.WriteSectors}
		}
		rates, err := tr.Sample()
		t.Wire = time.Now()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		for a, r := range rates {
			t.Peers[a.String()] = peer{r.ReadBytes, r.WriteBytes, r.ReadBps, r.WriteBps}
		}
		enc.Encode(t)
	}
}
