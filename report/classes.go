package report

import (
	"fmt"
	"math"
	"net/netip"
	"time"
)

// SLOClass is one of seed 004's classes with one member (Host), the
// lab's and the simulator's slo-classes: its objectives and burst.
type SLOClass struct {
	Name, Host     string
	Priority       int
	IOPS, MBs      float64
	Latency, Burst time.Duration
}

// YAML is the class's entry in a resource's classes, its member at addr,
// its burst scaled by burstScale.
func (c SLOClass) YAML(addr netip.Addr, burstScale float64) string {
	return fmt.Sprintf("      - {name: %s, members: [%s], priority: %d, iops: %v, mb_s: %v, latency: %v, burst: %v}\n",
		c.Name, addr, c.Priority, c.IOPS, c.MBs, c.Latency, time.Duration(float64(c.Burst)*burstScale).Round(time.Millisecond))
}

// ClassTick is a class's figures in one tick of the trace: its members'
// I/Os and bytes, and their I/O-weighted wait (ms; NaN: no I/O
// completed); Dt is the time since the previous tick (0.1 s for the
// first).
type ClassTick struct{ T, Dt, IOs, Bytes, Lat float64 }

// ClassTicks sums a class's members (hosts) per tick.
func ClassTicks[T Ticker](hosts []string, ticks []T) []ClassTick {
	var out []ClassTick
	prev := math.NaN()
	for _, tt := range ticks {
		t := tt.tick()
		ct := ClassTick{T: t.T, Dt: 0.1, Lat: math.NaN()}
		if !math.IsNaN(prev) && t.T > prev {
			ct.Dt = t.T - prev
		}
		prev = t.T
		var wait float64
		for _, h := range hosts {
			iv, ok := t.Dev[h]
			if !ok {
				continue
			}
			ct.IOs += float64(iv.Reads + iv.Writes)
			ct.Bytes += (iv.ReadBps + iv.WriteBps) * ct.Dt
			if iv.Reads > 0 && !math.IsNaN(iv.ReadWaitMs) {
				wait += iv.ReadWaitMs * float64(iv.Reads)
			}
			if iv.Writes > 0 && !math.IsNaN(iv.WriteWaitMs) {
				wait += iv.WriteWaitMs * float64(iv.Writes)
			}
		}
		if ct.IOs > 0 {
			ct.Lat = wait / ct.IOs
		}
		out = append(out, ct)
	}
	return out
}

// ClassMeans are a class's means over a window, the lab's and the
// simulator's slo-classes figures: IOPS, MB/s and I/O-weighted latency
// (NaN where undefined), and each tick's latency (seed 004's jitter's).
func ClassMeans[T Ticker](hosts []string, ticks []T) (iops, mbs, lat float64, lats []float64) {
	var ios, bytes, secs, latSum float64
	for _, ct := range ClassTicks(hosts, ticks) {
		secs, ios, bytes = secs+ct.Dt, ios+ct.IOs, bytes+ct.Bytes
		if !math.IsNaN(ct.Lat) {
			latSum += ct.Lat * ct.IOs
		}
		lats = append(lats, ct.Lat)
	}
	iops, mbs, lat = math.NaN(), math.NaN(), math.NaN()
	if secs > 0 {
		iops, mbs = ios/secs, bytes/secs/1e6
	}
	if ios > 0 {
		lat = latSum / ios
	}
	return iops, mbs, lat, lats
}

// ClassMet says a class met its objectives: throughput no more than 5 %
// below its floors (deviations in %), latency at or below its ceiling
// (deviation in ms), for the objectives set (NaN: none).
func ClassMet(iopsDev, tputDev, latDev float64) bool {
	return !(iopsDev < -5) && !(tputDev < -5) && !(latDev > 0)
}
