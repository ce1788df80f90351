package sim

import (
	"net/netip"
	"time"
)

// Job is one initiator workload (one fio job).
type Job struct {
	Name     string
	Consumer netip.Addr // the initiator's address: what the throttle keys on
	Device   string     // the LUN's block device on the target
	Write    bool
	Random   bool
	BS       int           // bytes per request
	IODepth  int           // requests in flight (fio numjobs × iodepth)
	RateBps  float64       // cap in bytes/s (0: none), fio's rate
	Start    time.Duration // on/off schedule: active in [Start, Start+Length)
	Length   time.Duration // 0: until the end
	// OnOff repeats the schedule: active for Length, idle for Off, from
	// Start on (0: once).
	Off time.Duration
	// Until ends the schedule (0: never).
	Until time.Duration
	// ReadFraction > 0 makes a mixed job (a VM's or a database's I/O):
	// each request is a read with this probability, else a write, drawn
	// from the model's one seeded source; Write is then ignored. 0 keeps
	// the job pure (Write decides), and draws nothing, so pure workloads
	// replay the same random sequence as before mixes existed.
	ReadFraction float64
}

func (j *Job) active(t time.Duration) bool {
	if t < j.Start || (j.Until > 0 && t >= j.Until) {
		return false
	}
	if j.Length == 0 {
		return true
	}
	if j.Off == 0 {
		return t < j.Start+j.Length
	}
	return (t-j.Start)%(j.Length+j.Off) < j.Length
}

// nextActive is the first time ≥ t the job is active (-1: never again).
func (j *Job) nextActive(t time.Duration) time.Duration {
	if j.active(t) {
		return t
	}
	if j.Until > 0 && t >= j.Until {
		return -1
	}
	if t < j.Start {
		return j.Start
	}
	if j.Off == 0 {
		return -1
	}
	period := j.Length + j.Off
	n := j.Start + ((t-j.Start)/period+1)*period
	if j.Until > 0 && n >= j.Until {
		return -1
	}
	return n
}
