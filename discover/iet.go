package discover

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// ParseIET parses IET's /proc/net/iet/session and /proc/net/iet/volume
// (iscsitarget kernel/{session,volume,conn}.c and iet's proc interface):
//
//	tid:1 name:iqn.2001-04.com.example:disk1
//		sid:562949974196736 initiator:iqn.1994-05.com.redhat:b2
//			cid:0 ip:10.0.0.242 state:active hd:none dd:none
//
//	tid:1 name:iqn.2001-04.com.example:disk1
//		lun:0 state:0 iotype:fileio iomode:wt blocks:2097152 blocksize:512 path:/dev/vg/lv
//
// IPv6 peers print bracketed ("ip:[fe80::1]"); older versions printed all
// eight groups zero-padded, which parses the same. A connection whose
// address the kernel could not format ("Unknown family N") is kept without
// an address rather than failing the whole file. Either input may be nil.
func ParseIET(session, volume []byte) ([]Target, error) {
	byTID := map[int]*Target{}
	var order []int
	target := func(tid int, name string) *Target {
		t := byTID[tid]
		if t == nil {
			t = &Target{TID: tid, IQN: name}
			byTID[tid] = t
			order = append(order, tid)
		}
		return t
	}
	if err := parseIETFile("session", session, target, func(t *Target, fields map[string]string, line string) error {
		if sid, ok := fields["sid"]; ok {
			id, err := strconv.ParseUint(sid, 10, 64)
			if err != nil {
				return fmt.Errorf("bad sid")
			}
			t.Sessions = append(t.Sessions, Session{ID: id, Initiator: fields["initiator"]})
			return nil
		}
		if cidS, ok := fields["cid"]; ok {
			if len(t.Sessions) == 0 {
				return fmt.Errorf("connection before any session")
			}
			cid, err := strconv.ParseUint(cidS, 10, 32)
			if err != nil {
				return fmt.Errorf("bad cid")
			}
			c := Conn{CID: uint32(cid), State: fields["state"]}
			if a, err := parseAddr(fields["ip"]); err == nil {
				c.Addr = a
			}
			s := &t.Sessions[len(t.Sessions)-1]
			s.Conns = append(s.Conns, c)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := parseIETFile("volume", volume, target, func(t *Target, fields map[string]string, line string) error {
		ls, ok := fields["lun"]
		if !ok {
			return nil
		}
		n, err := strconv.Atoi(ls)
		if err != nil || n < 0 {
			return fmt.Errorf("bad lun")
		}
		l := LUN{Number: n, Type: "disk", BackingType: fields["iotype"], Flags: fields["iomode"]}
		// The path is last and may contain spaces: take the rest of the line.
		if i := strings.Index(line, " path:"); i >= 0 {
			l.Path = line[i+len(" path:"):]
		}
		t.LUNs = append(t.LUNs, l)
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]Target, 0, len(order))
	for _, tid := range order {
		out = append(out, *byTID[tid])
	}
	return out, nil
}

func parseIETFile(what string, data []byte, target func(int, string) *Target,
	item func(*Target, map[string]string, string) error) error {
	var t *Target
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if line == "" {
			continue
		}
		fields := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, ":"); ok {
				if _, dup := fields[k]; !dup {
					fields[k] = v
				}
			}
		}
		if strings.HasPrefix(raw, "tid:") {
			tid, err := strconv.Atoi(fields["tid"])
			name := fields["name"]
			if err != nil || tid < 0 || name == "" {
				return fmt.Errorf("%w: iet %s line %d %q: bad target header", ErrSyntax, what, n, line)
			}
			t = target(tid, name)
			continue
		}
		if t == nil {
			return fmt.Errorf("%w: iet %s line %d %q: outside any target", ErrSyntax, what, n, line)
		}
		if err := item(t, fields, line); err != nil {
			return fmt.Errorf("%w: iet %s line %d %q: %v", ErrSyntax, what, n, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: iet %s: %v", ErrSyntax, what, err)
	}
	return nil
}
