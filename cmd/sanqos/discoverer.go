package main

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/capture"
	"github.com/sanqos/sanqos/config"
	"github.com/sanqos/sanqos/discover"
	"github.com/sanqos/sanqos/nvmetcp"
	"github.com/sanqos/sanqos/sample"
)

// newDiscoverer picks the discovery source of the config: the config's
// own topology (static), or snapshots of the target software, merged
// from all that auto finds on the host.
func newDiscoverer(cfg *config.Config) (agent.Discoverer, error) {
	if cfg.Discovery.Source == "static" {
		return agent.StaticDiscoverer(cfg), nil
	}
	probes, err := discoveryProbes(cfg.Discovery, nvmeHosts)
	if err != nil {
		return nil, err
	}
	resolver := &discover.Resolver{}
	return agent.SnapshotDiscoverer{Resources: cfg.Resources, Ports: cfg.TCPPorts(), Snap: func() (discover.Snapshot, error) {
		targets, found, err := discover.ReadAll(probes)
		if err != nil {
			return discover.Snapshot{}, err
		}
		snap := discover.BuildSnapshot(targets, resolver)
		snap.Sources = found
		return snap, nil
	}}, nil
}

// discoveryProbes are what source d reads: auto looks for tgt, LIO and
// the kernel NVMe target (root: configfs's mount point); a named source
// is read whether or not it looks present, so its failure says why.
// hosts finds nvmet's hosts.
func discoveryProbes(d config.Discovery, hosts discover.NVMeHosts) ([]discover.Probe, error) {
	always := func() bool { return true }
	orDefault := func(def string) string {
		if d.Root != "" {
			return d.Root
		}
		return def
	}
	switch d.Source {
	case "auto":
		return discover.AutoProbes(d.TgtControlPort, d.Root, hosts), nil
	case "tgt":
		return []discover.Probe{{Name: "tgt", Present: always, Read: func() ([]discover.Target, error) { return discover.Tgt(d.TgtControlPort) }}}, nil
	case "lio":
		// LIO's configfs: targets, LUNs → backstores, and each node ACL's
		// session with its connections' addresses.
		root := orDefault(discover.ConfigfsRoot + "/target")
		return []discover.Probe{{Name: "lio", Present: always, Read: func() ([]discover.Target, error) { return discover.ReadLIO(root) }}}, nil
	case "nvmet":
		root := orDefault(discover.ConfigfsRoot + "/nvmet")
		return []discover.Probe{{Name: "nvmet", Present: always, Read: func() ([]discover.Target, error) {
			return discover.NVMetTargets(root, hosts)
		}}}, nil
	}
	return nil, fmt.Errorf("discovery source %q is not wired yet", d.Source)
}

// The kernel NVMe target's hosts. nvmet's configfs does not say who is
// connected, so discovery takes them from the target's own socket table
// (sock_diag: the established connections on each nvmet port, in the
// agent's network namespace) and, for which subsystem each connection
// uses, from the Fabrics Connect each queue sends when it is set up:
// an AF_PACKET socket whose kernel filter passes only segments that
// start with a Connect capsule (nvmetcp.ConnectFilter), so the storage
// traffic never reaches the agent. A connection set up before the agent
// started has no Connect seen: discover maps it to every subsystem of
// its port ("unconfirmed"). Without CAP_NET_RAW the capture is off and
// every connection is unconfirmed where a port exports several
// subsystems.

// nvmeConnects are the Connects seen, by connection (host's end first).
type nvmeConnects struct {
	mu   sync.Mutex
	seen map[[2]netip.AddrPort]nvmetcp.Connect
}

var (
	connectsOnce sync.Once
	connects     *nvmeConnects // nil: no capture
)

// startConnects starts the process's one Connect capture, once; it runs
// until the process exits (a reload keeps it).
func startConnects(log *slog.Logger) *nvmeConnects {
	connectsOnce.Do(func() {
		raw, err := nvmetcp.ConnectFilter()
		if err != nil {
			log.Warn("NVMe/TCP Connect capture off", "err", err)
			return
		}
		cp, err := capture.OpenFiltered("", raw)
		if err != nil {
			log.Warn("NVMe/TCP Connect capture off: a connection's subsystem is known only where its port exports one", "err", err)
			return
		}
		c := &nvmeConnects{seen: map[[2]netip.AddrPort]nvmetcp.Connect{}}
		go func() {
			err := cp.Run(func(s capture.Segment) {
				if cn, ok := nvmetcp.ConnectIn(s.Payload); ok {
					c.mu.Lock()
					c.seen[[2]netip.AddrPort{unmap(s.Src), unmap(s.Dst)}] = cn
					c.mu.Unlock()
				}
			})
			log.Warn("NVMe/TCP Connect capture ended", "err", err)
		}()
		connects = c
	})
	return connects
}

func unmap(a netip.AddrPort) netip.AddrPort { return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) }

// nvmeHosts returns discovery's view of nvmet's hosts: the connections on
// its TCP ports, with each one's Connect where it was seen. Connects of
// connections gone are forgotten here.
func nvmeHosts(n discover.NVMet) ([]discover.NVMeConn, error) {
	c := startConnects(slog.Default())
	var out []discover.NVMeConn
	for _, port := range n.TCPServices() {
		conns, err := sample.Established(port)
		if err != nil {
			return nil, err
		}
		for _, e := range conns {
			out = append(out, discover.NVMeConn{Local: unmap(e.Local), Peer: unmap(e.Peer)})
		}
	}
	if c == nil {
		return out, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	live := map[[2]netip.AddrPort]bool{}
	for i := range out {
		k := [2]netip.AddrPort{out[i].Peer, out[i].Local}
		live[k] = true
		if cn, ok := c.seen[k]; ok {
			out[i].HostNQN, out[i].SubNQN = cn.HostNQN, cn.SubNQN
		}
	}
	for k := range c.seen {
		if !live[k] {
			delete(c.seen, k)
		}
	}
	return out, nil
}
