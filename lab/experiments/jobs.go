package experiments

import (
	"time"

	"github.com/sanqos/sanqos/lab"
)

// The load most experiments share: the thesis' small reader on b2 and
// sequential writers on b3..b5.

// reader is the thesis' "smalljob": 8 KiB random reads at 256 KiB/s, the
// protected reader, whose every read's latency the initiator logs.
func (r *runner) reader(runtime time.Duration) lab.Job {
	return lab.Job{Name: "smalljob", Host: "b2", URL: r.LUN("b2").URL, RW: "randread", BS: 8 << 10, Rate: 256 << 10, Runtime: runtime, Reader: true}
}

// writers spreads n sequential writer threads (64 KiB, see writerBS) over
// b3..b5, each host on its own LUN, each thread in its own region of it.
func (r *runner) writers(n int, start, runtime time.Duration) []lab.Job {
	bs := r.writerBS()
	var jobs []lab.Job
	hosts := lab.Hosts[1:]
	for i, h := range hosts {
		k := n / len(hosts)
		if i < n%len(hosts) {
			k++
		}
		if k == 0 {
			continue
		}
		j := r.writer(h, k, runtime)
		j.BS, j.Start = bs, start
		jobs = append(jobs, j)
	}
	return jobs
}

// writer is host's sequential 64 KiB writer: threads threads, each
// writing its own region of the host's LUN.
func (r *runner) writer(host string, threads int, runtime time.Duration) lab.Job {
	return lab.Job{Name: "writer", Host: host, URL: r.LUN(host).URL, RW: "write", BS: 64 << 10, NumJobs: threads, Runtime: runtime,
		Size: r.State.Options.LUNSize / int64(threads) / 65536 * 65536}
}

// writerBS is the writers' block size: the thesis' 64 KiB, made smaller
// on a modelled disk group slower than the default, to the power of two
// at or above 64 KiB × its share of the default's bandwidth, so that one
// write holds the group about as long as on the default (3.3 ms). On the
// stock-kernel guest's 4 MB/s group a 64 KiB write held it for 33 ms,
// longer than the 15 and 20 ms thresholds themselves: a read queued
// behind any single write missed them, whatever a throttle did (even an
// 80 ms delay on every writer left the reader's p95 at 25.7 ms). There
// the writers write 8 KiB.
func (r *runner) writerBS() int { return r.groupBS(64 << 10) }

func scaledBS(bs int, bw, def float64) int {
	if bw <= 0 || bw >= def {
		return bs
	}
	want := float64(bs) * bw / def
	for bs > 4<<10 && float64(bs/2) >= want {
		bs /= 2
	}
	return bs
}
