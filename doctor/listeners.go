package doctor

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sanqos/sanqos/agent"
)

// listenersCheck looks at what the agent would listen on: its control
// socket (it refuses to start when another agent answers there) and its
// HTTP address (it cannot start when the port is taken). It connects to
// the socket and hangs up, and reads /proc/net/tcp{,6}; it binds nothing.
func (e *Env) listenersCheck() Result {
	cfg := e.Config
	sock := agent.DefaultSocket
	if e.configured() {
		sock = cfg.Socket
	}
	r := Result{Status: OK}
	var sum []string
	if e.Host.exists(sock) && e.Host.DialUnix(e.Host.path(sock)) == nil {
		// The agent's own words (agent.ListenUnix).
		r.Status = Fail
		sum = append(sum, "another agent is listening on "+sock)
	} else {
		sum = append(sum, "control socket "+sock+" free")
	}
	if e.configured() && cfg.HTTP != "" {
		why, err := e.httpTaken(cfg.HTTP)
		switch {
		case err != nil:
			r.Status = Fail
			sum = append(sum, fmt.Sprintf("http %q: %v", cfg.HTTP, err))
		case why != "":
			r.Status = Fail
			sum = append(sum, fmt.Sprintf("http %s: port taken by a listener on %s", cfg.HTTP, why))
		default:
			sum = append(sum, "http "+cfg.HTTP+" free")
		}
	} else {
		r.Detail = append(r.Detail, "no HTTP listener: without --config the agent serves one only with --http")
	}
	r.Summary = strings.Join(sum, "; ")
	return r
}

// httpTaken returns the address of a TCP listener that would make binding
// addr fail with EADDRINUSE: the same port on the same address, or either
// side a wildcard ([::] covers IPv4 too unless v6only, which doctor cannot
// see, so it counts).
func (e *Env) httpTaken(addr string) (string, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return "", fmt.Errorf("port %q: %w", portStr, err)
	}
	if port == 0 {
		return "", nil // the kernel picks a free one
	}
	want := netip.IPv6Unspecified()
	if host != "" {
		if want, err = netip.ParseAddr(host); err != nil {
			return "", fmt.Errorf("host %q is not an address", host)
		}
	}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := e.Host.read(f)
		if err != nil {
			continue
		}
		for _, ap := range tcpListeners(b) {
			if ap.Port() != uint16(port) {
				continue
			}
			a := ap.Addr()
			if a == want.Unmap() || a == want || a.IsUnspecified() || want.IsUnspecified() {
				return ap.String(), nil
			}
		}
	}
	return "", nil
}

// tcpListeners parses /proc/net/tcp or tcp6: the local addresses of
// sockets in state 0A (LISTEN). The kernel prints each 32-bit word of an
// address in host byte order.
func tcpListeners(b []byte) []netip.AddrPort {
	var out []netip.AddrPort
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		hexAddr, hexPort, ok := strings.Cut(f[1], ":")
		raw, err1 := hex.DecodeString(hexAddr)
		port, err2 := strconv.ParseUint(hexPort, 16, 16)
		if !ok || err1 != nil || err2 != nil || (len(raw) != 4 && len(raw) != 16) {
			continue
		}
		for i := 0; i < len(raw); i += 4 {
			binary.BigEndian.PutUint32(raw[i:], binary.NativeEndian.Uint32(raw[i:]))
		}
		a, _ := netip.AddrFromSlice(raw)
		out = append(out, netip.AddrPortFrom(a.Unmap(), uint16(port)))
	}
	return out
}
