package sim

import "time"

// Issue 30's interferers: the reader is protected not only from writers
// but from whoever saturates the pool, in whichever direction. Both
// experiments keep autonomic's reader, cycles, thresholds and default
// config (threshold only), and add the oracle, so the controller can be
// tuned against these loads without the lab.
//
// The two differ in what a delay can do. A backup's 64 KiB reads carry
// about one TCP window each, so a read delay adds about itself to every
// request and, on 12 streams, first shortens the queue the reader waits
// in (the disk stays busy) and only past ~18 ms idles the disk. Mixed
// random I/O spends most of each request seeking, and its small requests
// carry a fraction of a window, so a delay within max_delay barely thins
// its queue: there the oracle reports thresholds unreachable.

func init() {
	register(&Scenario{Name: "read-backup", Title: "autonomic vs a backup: b3-b5 read sequentially, 64 KiB, 4 streams each, toggled on/off; with the static-delay oracle",
		Run: func(o Options) (any, error) { return runControlled(o, readBackupExperiment) }})
	register(&Scenario{Name: "mixed", Title: "autonomic vs VMs and a database: b3-b5 random 8/64 KiB reads and writes (70/30, 50/50), toggled on/off; with the static-delay oracle",
		Run: func(o Options) (any, error) { return runControlled(o, mixedExperiment) }})
}

var (
	readBackupExperiment = &controlled{name: "read-backup", interferers: "readers", many: "12 backup streams", load: backupReaders, autonomic: true, oracle: true}
	mixedExperiment      = &controlled{name: "mixed", interferers: "mixed", many: "6 mixed streams", load: mixedIO, autonomic: true, oracle: true}
)

// backupReaders is a backup spread over b3..b5: each host reads its own
// LUN sequentially, 64 KiB, 4 streams (fio's libiscsi engine is
// synchronous, so each stream has one request in flight, as the writers'
// threads do).
func backupReaders(start, length, off time.Duration) []*Job { return readers(12, start, length, off) }

// mixes are the mixed experiment's hosts: random I/O as VMs and
// databases issue it, each request's direction drawn per request.
var mixes = []struct {
	name    string
	bs      int
	read    float64 // share of requests that read
	streams int
}{
	{"vm", 8 << 10, 0.7, 2},          // a VM's general I/O
	{"oltp", 8 << 10, 0.5, 2},        // an OLTP database's data file
	{"checkpoint", 64 << 10, 0.5, 2}, // a VM's larger I/O, a database checkpoint
}

// mixedIO puts mixes[i] on Hosts[i+1] (b3, b4, b5), each on its own LUN.
func mixedIO(start, length, off time.Duration) []*Job {
	var jobs []*Job
	for i, x := range mixes {
		jobs = append(jobs, &Job{Name: x.name, Consumer: HostAddr(Hosts[i+1]), Device: Devices[i+1], Random: true, ReadFraction: x.read,
			BS: x.bs, IODepth: x.streams, Start: start, Length: length, Off: off})
	}
	return jobs
}
