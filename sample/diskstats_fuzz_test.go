package sample

import (
	"os"
	"path/filepath"
	"testing"
)

// /proc/diskstats is kernel text, but a parser of outside text must turn
// any content into counters or an error, never a panic.
func FuzzDiskstats(f *testing.F) {
	real, err := os.ReadFile("testdata/proc/diskstats")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(real))
	f.Add("   7       0 loop0 1 2 3 4 5 6 7 8 9 10 11\n")
	f.Add("   7       0 loop0 x\n")
	f.Fuzz(func(t *testing.T, text string) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "diskstats"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := NewDiskstats(dir, dir)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := d.Read()
		if err != nil {
			return
		}
		for name, c := range cs {
			if name != c.Device {
				t.Fatalf("key %q holds device %q", name, c.Device)
			}
		}
	})
}
