package lab

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// alignedBuf returns a buffer aligned for O_DIRECT.
func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := 4096 - int(uintptr(unsafe.Pointer(&b[0]))&4095)
	return b[off : off+n]
}

// MeasureCapacity measures what the resource behind dir delivers, with
// direct I/O on a scratch file: four 64 KiB sequential writers, then one
// 8 KiB random reader. It is the figure `lab status` prints.
func MeasureCapacity(dir string, d time.Duration) (Capacity, error) {
	path := filepath.Join(dir, ".calibrate")
	defer os.Remove(path)
	const region = 64 << 20
	// Create first, then open: on the modelled disk only Open (not Create)
	// hands out handles that pass through the queue.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return Capacity{}, err
	}
	if err := os.Truncate(path, 4*region); err != nil {
		return Capacity{}, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		return Capacity{}, err
	}
	defer f.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var written int64
	var werr error
	end := time.Now().Add(d)
	start := time.Now()
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			buf := alignedBuf(64 << 10)
			var n int64
			for off := int64(w) * region; time.Now().Before(end); off += int64(len(buf)) {
				if _, err := f.WriteAt(buf, off); err != nil {
					mu.Lock()
					werr = err
					mu.Unlock()
					return
				}
				n += int64(len(buf))
			}
			mu.Lock()
			written += n
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	if werr != nil {
		return Capacity{}, werr
	}
	c := Capacity{SeqWriteMBs: float64(written) / time.Since(start).Seconds() / 1e6, MeasuredOnDir: dir, MeasuredAt: time.Now().UTC().Format(time.RFC3339)}
	buf := alignedBuf(8 << 10)
	rng := rand.New(rand.NewPCG(1, 2))
	var reads int
	start = time.Now()
	for end = start.Add(d / 2); time.Now().Before(end); reads++ {
		off := rng.Int64N(4*region/8192) * 8192
		if _, err := f.ReadAt(buf, off); err != nil {
			return Capacity{}, err
		}
	}
	el := time.Since(start).Seconds()
	c.RandReadIOPS = float64(reads) / el
	c.RandReadMs = el / float64(reads) * 1e3
	return c, nil
}
