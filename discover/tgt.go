package discover

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// ParseTgtadm parses the output of `tgtadm --lld iscsi --op show --mode
// target` (tgt 1.0.x; format from usr/target.c and usr/iscsi/target.c of
// tgt). Empty output is zero targets. Lines it does not know inside a known
// section are skipped, so new tgt fields do not break discovery; lines that
// cannot be placed (a LUN field before any "LUN:", a connection address
// before any "I_T nexus:") are errors. It is one function because it is
// one pass over the lines whose state (the current target, connection
// and LUN) every section's lines update.
func ParseTgtadm(out []byte) ([]Target, error) {
	var (
		targets []Target
		t       *Target
		section string
		sess    *Session
		conn    *Conn
		lun     *LUN
	)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if line == "" {
			continue
		}
		fail := func(why string) ([]Target, error) {
			return nil, fmt.Errorf("%w: tgtadm line %d %q: %s", ErrSyntax, n, line, why)
		}
		if strings.HasPrefix(raw, "Target ") {
			// "Target 1: iqn.2026-11.lab:vg1"
			num, iqn, ok := strings.Cut(strings.TrimPrefix(raw, "Target "), ": ")
			tid, err := strconv.Atoi(num)
			if !ok || err != nil || tid < 0 || strings.TrimSpace(iqn) == "" {
				return fail("bad target header")
			}
			targets = append(targets, Target{TID: tid, IQN: strings.TrimSpace(iqn)})
			t, section, sess, conn, lun = &targets[len(targets)-1], "", nil, nil, nil
			continue
		}
		if t == nil {
			return fail("outside any target")
		}
		if strings.HasSuffix(line, " information:") {
			section = strings.TrimSuffix(line, " information:")
			sess, conn, lun = nil, nil, nil
			continue
		}
		key, val, hasColon := strings.Cut(line, ":")
		val = strings.TrimSpace(val)
		switch section {
		case "System":
			if hasColon && key == "State" {
				t.State = val
			}
		case "I_T nexus":
			switch {
			case hasColon && key == "I_T nexus":
				id, err := strconv.ParseUint(val, 10, 64)
				if err != nil {
					return fail("bad nexus id")
				}
				t.Sessions = append(t.Sessions, Session{ID: id})
				sess, conn = &t.Sessions[len(t.Sessions)-1], nil
			case hasColon && key == "Initiator":
				if sess == nil {
					return fail("initiator outside a nexus")
				}
				// "iqn.x:y alias: none" — the IQN cannot contain spaces.
				name, alias, _ := strings.Cut(val, " alias:")
				sess.Initiator = strings.TrimSpace(name)
				if a := strings.TrimSpace(alias); a != "none" {
					sess.Alias = a
				}
			case hasColon && key == "Connection":
				if sess == nil {
					return fail("connection outside a nexus")
				}
				cid, err := strconv.ParseUint(val, 10, 32)
				if err != nil {
					return fail("bad connection id")
				}
				sess.Conns = append(sess.Conns, Conn{CID: uint32(cid)})
				conn = &sess.Conns[len(sess.Conns)-1]
			case hasColon && strings.HasSuffix(key, "IP Address"): // also iSER's "RDMA IP Address"
				if conn == nil {
					return fail("address outside a connection")
				}
				a, err := parseAddr(val)
				if err != nil {
					return fail(err.Error())
				}
				conn.Addr = a
			}
		case "LUN":
			if hasColon && key == "LUN" {
				num, err := strconv.Atoi(val)
				if err != nil || num < 0 {
					return fail("bad LUN number")
				}
				t.LUNs = append(t.LUNs, LUN{Number: num})
				lun = &t.LUNs[len(t.LUNs)-1]
				continue
			}
			if !hasColon {
				continue
			}
			if lun == nil {
				return fail("LUN field before any LUN")
			}
			switch key {
			case "Type":
				lun.Type = val
			case "Backing store type":
				lun.BackingType = val
			case "Backing store path":
				if val != "None" {
					lun.Path = val
				}
			case "Backing store flags":
				lun.Flags = val
			}
		case "Account":
			t.Accounts = append(t.Accounts, line)
		case "ACL":
			t.ACL = append(t.ACL, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: tgtadm output: %v", ErrSyntax, err)
	}
	return targets, nil
}

// ParseTgtPortals parses the output of `tgtadm --lld iscsi --op show
// --mode portal` (tgt's iscsi_portal_show: one "Portal: <address>:<port>,
// <tpgt>" line per listening portal) into the TCP ports tgtd listens on.
// A line that is not a portal is an error: skipped, a portal tgt came to
// print otherwise would leave its port unnoticed, its hosts unthrottled.
func ParseTgtPortals(out []byte) ([]uint16, error) {
	var portals []string
	for n, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		portal, ok := strings.CutPrefix(line, "Portal:")
		switch {
		case ok:
			addrPort, _, _ := strings.Cut(strings.TrimSpace(portal), ",")
			portals = append(portals, addrPort)
		case line != "":
			return nil, fmt.Errorf("%w: tgtadm portal line %d %q: not a portal", ErrSyntax, n+1, line)
		}
	}
	return portalPorts(portals)
}

// portalPorts are the TCP ports of iSCSI portals written <address>:<port>
// (an IPv6 address in brackets: tgt's portals, LIO's np directories),
// sorted, each once. The address is not checked: tgt keeps a host name
// as it was given.
func portalPorts(portals []string) ([]uint16, error) {
	var ports []uint16
	for _, s := range portals {
		i := strings.LastIndexByte(s, ':')
		p, err := strconv.ParseUint(s[i+1:], 10, 16)
		if i <= 0 || err != nil || p == 0 {
			return nil, fmt.Errorf("%w: portal %q is not <address>:<port>", ErrSyntax, s)
		}
		ports = append(ports, uint16(p))
	}
	slices.Sort(ports)
	return slices.Compact(ports), nil
}

// parseAddr accepts an address as targets print it: bare, bracketed IPv6
// ("[::1]", IET) or with a zone.
func parseAddr(s string) (netip.Addr, error) {
	s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "["), "]")
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bad address %q", s)
	}
	return a.Unmap(), nil
}
