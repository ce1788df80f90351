package discover

import (
	"os"
	"path/filepath"
	"testing"
)

func seed(f *testing.F, glob string) {
	files, _ := filepath.Glob(filepath.Join("testdata", glob))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
}

func FuzzParseTgtadm(f *testing.F) {
	seed(f, "tgtadm-*.txt")
	f.Add([]byte("Target 1: a\n    I_T nexus information:\n        I_T nexus: 1\n            Connection: 0\n                IP Address: [::1]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := ParseTgtadm(b)
		if err == nil {
			for _, tg := range ts {
				for _, s := range tg.Sessions {
					_ = s.Addrs()
				}
			}
		}
	})
}

func FuzzParseIET(f *testing.F) {
	s, _ := os.ReadFile(filepath.Join("testdata", "iet-session.txt"))
	v, _ := os.ReadFile(filepath.Join("testdata", "iet-volume.txt"))
	f.Add(s, v)
	f.Add([]byte("tid:1 name:a\n\tsid:1 initiator:x\n\t\tcid:0 ip:[::1] state:active\n"), []byte("tid:1 name:a\n\tlun:0 path:"))
	f.Fuzz(func(t *testing.T, s, v []byte) {
		_, _ = ParseIET(s, v)
	})
}

func FuzzParseLIOInfo(f *testing.F) {
	seed(f, "lio/target/iscsi/*/tpgt_1/acls/*/info")
	f.Add([]byte("CID: 0  Connection State: X\n   Address\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = ParseLIOInfo(b)
	})
}
