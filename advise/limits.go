package advise

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ReadLimits reads the current buffer limits under root (/proc/sys on a
// live system; a fixture directory in tests). Missing files leave zeros.
func ReadLimits(root string) (Limits, error) {
	var l Limits
	one := func(rel string, dst *uint64) error {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		*dst = v
		return nil
	}
	three := func(rel string, dst *[3]uint64) error {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			return err
		}
		f := strings.Fields(string(b))
		if len(f) != 3 {
			return fmt.Errorf("%s: want three numbers, got %q", rel, b)
		}
		for i, s := range f {
			if dst[i], err = strconv.ParseUint(s, 10, 64); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		}
		return nil
	}
	for _, e := range []error{
		one("net/core/rmem_max", &l.RmemMax), one("net/core/wmem_max", &l.WmemMax),
		three("net/ipv4/tcp_rmem", &l.TCPRmem), three("net/ipv4/tcp_wmem", &l.TCPWmem),
	} {
		if e != nil {
			return l, e
		}
	}
	return l, nil
}
