package discover

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ReadLIO reads LIO's configfs tree under root (normally
// /sys/kernel/config/target). Layout, as created by the kernel's
// target_core_fabric_configfs.c / target_core_configfs.c and populated by
// rtslib-fb (targetcli):
//
//	iscsi/<target iqn>/tpgt_<tag>/lun/lun_<N>/<link> → ../../../../../../target/core/<hba>_<i>/<dev>
//	iscsi/<target iqn>/tpgt_<tag>/acls/<initiator iqn>/info            (sessions, see ParseLIOInfo)
//	iscsi/<target iqn>/tpgt_<tag>/acls/<initiator iqn>/lun_<M>/<link> → ../../../lun/lun_<N>
//	iscsi/<target iqn>/tpgt_<tag>/dynamic_sessions                      (initiator names, one per line)
//	iscsi/<target iqn>/tpgt_<tag>/np/<address>:<port>                   (the TPG's portals; IPv6 as [::]:3260)
//	core/<hba>_<i>/<dev>/udev_path                                      (backing device or file)
//
// Sessions of initiators without an explicit ACL (generate_node_acls=1)
// appear only by name in dynamic_sessions; configfs does not give their
// address, so they come back without connections.
func ReadLIO(root string) ([]Target, error) {
	iscsi := filepath.Join(root, "iscsi")
	ents, err := os.ReadDir(iscsi)
	if err != nil {
		return nil, fmt.Errorf("discover: LIO: %w", err)
	}
	var targets []Target
	for _, e := range ents {
		name := e.Name()
		// Also holds discovery_auth/ and lio_version; target names are
		// iqn., eui. or naa. (RFC 3720 §3.2.6.3).
		if !e.IsDir() || !(strings.HasPrefix(name, "iqn.") || strings.HasPrefix(name, "eui.") || strings.HasPrefix(name, "naa.")) {
			continue
		}
		tpgs, err := os.ReadDir(filepath.Join(iscsi, name))
		if err != nil {
			return nil, fmt.Errorf("discover: LIO: %w", err)
		}
		for _, tp := range tpgs {
			tag, ok := strings.CutPrefix(tp.Name(), "tpgt_")
			tagN, err := strconv.Atoi(tag)
			if !ok || err != nil || !tp.IsDir() {
				continue
			}
			t, err := readTPG(filepath.Join(iscsi, name, tp.Name()), name, tagN)
			if err != nil {
				return nil, err
			}
			targets = append(targets, t)
		}
	}
	return targets, nil
}

func readTPG(dir, iqn string, tag int) (Target, error) {
	t := Target{TID: tag, IQN: iqn}
	if b, err := os.ReadFile(filepath.Join(dir, "enable")); err == nil {
		if strings.TrimSpace(string(b)) == "1" {
			t.State = "enabled"
		} else {
			t.State = "disabled"
		}
	}
	luns, err := os.ReadDir(filepath.Join(dir, "lun"))
	if err != nil && !os.IsNotExist(err) {
		return t, fmt.Errorf("discover: LIO: %w", err)
	}
	for _, l := range luns {
		n, ok := lunIndex(l.Name())
		if !ok {
			continue
		}
		lun := LUN{Number: n, Type: "disk"}
		if bs, ok := linkIn(filepath.Join(dir, "lun", l.Name())); ok {
			lun.BackingType, lun.Path = readBackstore(bs)
		}
		t.LUNs = append(t.LUNs, lun)
	}
	sort.Slice(t.LUNs, func(i, j int) bool { return t.LUNs[i].Number < t.LUNs[j].Number })
	if t.Ports, err = readNPs(filepath.Join(dir, "np")); err != nil {
		return t, err
	}

	acls, err := os.ReadDir(filepath.Join(dir, "acls"))
	if err != nil && !os.IsNotExist(err) {
		return t, fmt.Errorf("discover: LIO: %w", err)
	}
	for _, a := range acls {
		if !a.IsDir() {
			continue
		}
		adir := filepath.Join(dir, "acls", a.Name())
		info, err := os.ReadFile(filepath.Join(adir, "info"))
		if err != nil {
			continue
		}
		s, ok, err := ParseLIOInfo(info)
		if err != nil {
			return t, fmt.Errorf("%s: %w", adir, err)
		}
		if !ok {
			continue
		}
		if s.Initiator == "" {
			s.Initiator = a.Name()
		}
		s.LUNs = []int{} // an ACL maps LUNs explicitly: none mapped is none
		mapped, _ := os.ReadDir(adir)
		for _, m := range mapped {
			if _, ok := lunIndex(m.Name()); !ok {
				continue
			}
			if tl, ok := linkIn(filepath.Join(adir, m.Name())); ok {
				if n, ok := lunIndex(filepath.Base(tl)); ok {
					s.LUNs = append(s.LUNs, n)
				}
			}
		}
		sort.Ints(s.LUNs)
		t.Sessions = append(t.Sessions, s)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "dynamic_sessions")); err == nil {
		for _, name := range strings.Fields(string(b)) {
			t.Sessions = append(t.Sessions, Session{Initiator: name})
		}
	}
	return t, nil
}

// readNPs returns the TCP ports of a TPG's network portals (its np/
// directories); a TPG without np/ has none.
func readNPs(dir string) ([]uint16, error) {
	nps, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("discover: LIO: %w", err)
	}
	var portals []string
	for _, np := range nps {
		if np.IsDir() {
			portals = append(portals, np.Name())
		}
	}
	ports, err := portalPorts(portals)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return ports, nil
}

func lunIndex(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "lun_")
	n, err := strconv.Atoi(s)
	return n, ok && err == nil && n >= 0
}

// linkIn returns the target of the first symlink in dir, resolved against
// dir (configfs links are relative).
func linkIn(dir string) (string, bool) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", false
	}
	for _, e := range ents {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		dst, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if !filepath.IsAbs(dst) {
			dst = filepath.Join(dir, dst)
		}
		return filepath.Clean(dst), true
	}
	return "", false
}

// readBackstore returns the backstore's plugin ("iblock", "fileio", from its
// HBA directory name "<plugin>_<index>") and its udev_path, which rtslib
// sets to the block device or file for iblock, fileio and pscsi.
func readBackstore(dir string) (kind, path string) {
	hba := filepath.Base(filepath.Dir(dir))
	if i := strings.LastIndexByte(hba, '_'); i > 0 {
		kind = hba[:i]
	}
	if b, err := os.ReadFile(filepath.Join(dir, "udev_path")); err == nil {
		path = strings.TrimSpace(string(b))
	}
	return kind, path
}

// ParseLIOInfo parses an ACL's info attribute (lio_target_nacl_info_show in
// the kernel's drivers/target/iscsi/iscsi_target_configfs.c). ok is false
// for "No active iSCSI Session for Initiator Endpoint: …".
func ParseLIOInfo(b []byte) (s Session, ok bool, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "No active iSCSI Session"):
			return Session{}, false, nil
		case strings.HasPrefix(line, "InitiatorName:"):
			s.Initiator, ok = strings.TrimSpace(strings.TrimPrefix(line, "InitiatorName:")), true
		case strings.HasPrefix(line, "InitiatorAlias:"):
			s.Alias = strings.TrimSpace(strings.TrimPrefix(line, "InitiatorAlias:"))
		case strings.HasPrefix(line, "LIO Session ID:") && len(f) >= 4:
			id, perr := strconv.ParseUint(f[3], 10, 32)
			if perr != nil {
				return Session{}, false, fmt.Errorf("%w: LIO info line %d %q: bad session id", ErrSyntax, n, line)
			}
			s.ID, ok = id, true
		case strings.HasPrefix(line, "CID:") && len(f) >= 2:
			cid, perr := strconv.ParseUint(f[1], 10, 16)
			if perr != nil {
				return Session{}, false, fmt.Errorf("%w: LIO info line %d %q: bad CID", ErrSyntax, n, line)
			}
			c := Conn{CID: uint32(cid)}
			if i := strings.Index(line, "State:"); i >= 0 {
				c.State = strings.TrimSpace(line[i+len("State:"):])
			}
			s.Conns = append(s.Conns, c)
		case len(f) >= 2 && f[0] == "Address":
			if len(s.Conns) == 0 {
				return Session{}, false, fmt.Errorf("%w: LIO info line %d %q: address before any connection", ErrSyntax, n, line)
			}
			a, perr := parseAddr(f[1])
			if perr != nil {
				return Session{}, false, fmt.Errorf("%w: LIO info line %d: %v", ErrSyntax, n, perr)
			}
			s.Conns[len(s.Conns)-1].Addr = a
		}
	}
	if err := sc.Err(); err != nil {
		return Session{}, false, fmt.Errorf("%w: LIO info: %v", ErrSyntax, err)
	}
	return s, ok, nil
}
