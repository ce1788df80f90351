package agent

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
)

// The HTTP listener is for eyes (metrics, status, dashboard); changing
// throttles belongs to the root-only unix socket. Two guards keep it so:
// sameOrigin refuses any state-changing request a browser sends on behalf
// of another site (the classic CSRF against a localhost service), and
// tokenOnly opens the control API over HTTP only to requests carrying the
// configured bearer token.

// sameOrigin refuses requests other than GET/HEAD/OPTIONS whose Origin (or,
// lacking it, Referer) names another host than the one addressed. Requests
// without either header come from non-browser clients, which a CSRF cannot
// forge, and pass to the token check.
func sameOrigin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			h.ServeHTTP(w, r)
			return
		}
		src := r.Header.Get("Origin")
		if src == "" {
			src = r.Header.Get("Referer")
		}
		if src != "" {
			u, err := url.Parse(src)
			if err != nil || !strings.EqualFold(u.Host, r.Host) {
				writeJSON(w, http.StatusForbidden, map[string]string{"error": "cross-origin request refused"})
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// tokenOnly serves h to requests with "Authorization: Bearer <token>";
// with no token configured it refuses everything, saying how to enable it.
func tokenOnly(token string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token == "" {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "the control API is served on the unix socket only; set token_file to open it over HTTP"})
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sanqos"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong bearer token"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// peerUIDListener accepts unix-socket connections only from processes
// running as uid (root for the agent): a defence beside the socket's 0600
// mode, which a careless chmod or a bind mount could loosen.
type peerUIDListener struct {
	net.Listener
	uid uint32
}

func (l peerUIDListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if uc, ok := c.(*net.UnixConn); ok && peerUID(uc) == int64(l.uid) {
			return c, nil
		}
		c.Close()
	}
}

// peerUID is the uid of the process at the other end, -1 if unknown.
func peerUID(c *net.UnixConn) int64 {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1
	}
	uid := int64(-1)
	raw.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			uid = int64(cred.Uid)
		}
	})
	return uid
}
