package experiments

import (
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/sample"
)

func readWait(iv sample.Interval) float64 { return iv.ReadWaitMs }
func readMBs(iv sample.Interval) float64  { return iv.ReadBps / 1e6 }
func writeMBs(iv sample.Interval) float64 { return iv.WriteBps / 1e6 }

// rateOf is direction dir's rate (MB/s): "read" or "write".
func rateOf(dir string) func(sample.Interval) float64 {
	if dir == "write" {
		return writeMBs
	}
	return readMBs
}

func sumTCP(rs []*lab.PhaseResult) lab.TCPCounters {
	var n lab.TCPCounters
	for _, r := range rs {
		n = n.Add(r.TCP)
	}
	return n
}

// runTCP is a summary's TCP counters over all its phases, beside their
// retransmitted segments alone.
type runTCP struct {
	Retrans uint64          `json:"retransmits"`
	TCP     lab.TCPCounters `json:"tcp"`
}

// tcpOf totals the phases' counters.
func tcpOf(rs []*lab.PhaseResult) runTCP {
	t := sumTCP(rs)
	return runTCP{t.RetransSegs, t}
}

// tcpTotal is what eachBackend reads of a summary (backendRun).
func (t runTCP) tcpTotal() lab.TCPCounters { return t.TCP }
