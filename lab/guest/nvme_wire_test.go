package guest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/capture"
	"github.com/sanqos/sanqos/iscsipdu"
	"github.com/sanqos/sanqos/lab"
	"github.com/sanqos/sanqos/passive"
)

// wireKey is one host's reads or writes, as the wire timed them.
type wireKey struct {
	host netip.Addr
	op   iscsipdu.Op
}

func (k wireKey) String() string {
	return fmt.Sprintf("%s %s", k.host, map[iscsipdu.Op]string{iscsipdu.OpRead: "reads", iscsipdu.OpWrite: "writes"}[k.op])
}

// wireLatencies replays a capture of the lab's NVMe/TCP port through
// bridge mode's meter (passive, the nvmetcp tracker) and returns each
// host's read and write latencies in ms, command by command.
func wireLatencies(t *testing.T, pcap io.Reader) map[wireKey][]float64 {
	t.Helper()
	m, err := passive.NewMeter([]passive.Resource{{Name: "vg1", Portals: []netip.AddrPort{netip.AddrPortFrom(lab.TargetAddr, lab.NVMePort)}}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[wireKey][]float64{}
	m.OnSample = func(_ string, ini netip.Addr, op iscsipdu.Op, lat time.Duration) {
		if op == iscsipdu.OpRead || op == iscsipdu.OpWrite {
			k := wireKey{ini, op}
			out[k] = append(out[k], float64(lat)/1e6)
		}
	}
	if err := capture.ReadPcap(pcap, func(pkt []byte, ts time.Time) {
		if s, ok := capture.Decode(pkt, ts); ok {
			m.Segment(s)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// fioDir is one direction of an fio job: I/Os completed and the median
// completion latency (clat), ms.
type fioDir struct {
	n        int
	p50, lat float64 // lat: slat + clat, fio's lat_percentiles
}

type fioLat struct{ read, write fioDir }

// parseFioLat reads fio's JSON output (one job).
func parseFioLat(t *testing.T, b []byte) fioLat {
	t.Helper()
	type dir struct {
		IOs  int `json:"total_ios"`
		Clat struct {
			Percentile map[string]float64
		} `json:"clat_ns"`
		Lat struct {
			Percentile map[string]float64
		} `json:"lat_ns"`
	}
	var res struct {
		Jobs []struct{ Read, Write dir }
	}
	s := string(b)
	if err := json.Unmarshal([]byte(s[max(0, strings.Index(s, "{")):]), &res); err != nil || len(res.Jobs) != 1 {
		t.Fatalf("fio's JSON: %v\n%s", err, b)
	}
	conv := func(d dir) fioDir {
		return fioDir{d.IOs, d.Clat.Percentile["50.000000"] / 1e6, d.Lat.Percentile["50.000000"] / 1e6}
	}
	return fioLat{conv(res.Jobs[0].Read), conv(res.Jobs[0].Write)}
}

// wireAgainstFio is issue 54's passive latency against fio's, in the
// same run (from nvmeInGuest: the nvmet lab is up, vg1's hosts
// connected): b3 reads and b4 writes its namespace, 8 KiB at queue depth
// 1, both at once, while `sanqos capture` (bridge mode's capture, the
// meter's NVMe/TCP tracker) copies the port's traffic on three ports of
// the lab's bridge (namespace sqlan): each host's own (p-b3, p-b4) and
// the target's (p-bm). Replayed here through the meter, per host and
// direction, the wire's median is logged beside fio's median completion
// latency (clat) and total latency (lat: submission and completion) of
// the same I/Os.
//
// What holds: the host's port times every I/O fio did; the intervals are
// nested, so the medians are ordered: the target's port sees each
// command later and its answer earlier than the host's (the bridge's
// forwarding between them), and the host's port sees both inside fio's
// total. What the guest does not give is issue 54's 10 % against clat:
// fio's clat starts when io_submit returns, and in this one TCG kernel
// io_submit has by then sent the capsule and run its way through veth,
// the bridge and nvmet's receive (fio's submission latency, 2-14 ms
// here); clat ends after the host's receive path, which the wire misses.
// The two errors have opposite signs and TCG sizes them in milliseconds:
// over four runs the host's port read -14 % to +17 % of clat, the
// target's -27 % to +13 % (BENCHMARKS.md). The check against clat is a
// band for that (25 %): a tracker timing the wrong thing misses it.
func wireAgainstFio(t *testing.T, gexec func(time.Duration, string) string, gbin, dir string) {
	t.Helper()
	ports := []string{"p-b3", "p-b4", "p-bm"}
	job := func(host string, nsid int, rw string) string {
		return fmt.Sprintf(`D=$(for c in /sys/class/nvme/nvme*; do grep -q ':vg1$' $c/subsysnqn && grep -q ':%[1]s$' $c/hostnqn && for d in $c/nvme*n*; do [ "$(cat $d/nsid)" = %[2]d ] && basename $d; done; done)
ip netns exec %[1]s fio --name=%[1]s --filename=/dev/$D --ioengine=libaio --direct=1 --rw=%[3]s --bs=8k --iodepth=1 --runtime=10 --time_based --lat_percentiles=1 --output-format=json --output=%[4]s/wire-%[1]s.json &
F="$F $!"
`, host, nsid, rw, dir)
	}
	script := ""
	for _, p := range ports {
		// Each capture prints its header once its socket is open.
		script += fmt.Sprintf(`ip netns exec %[1]s %[2]s capture --interface %[3]s --iscsi-port %[4]d --portal %[5]s --pcap /run/wire-%[3]s.pcap > /run/wire-%[3]s.out 2>&1 &
echo $! > /run/wire-%[3]s.pid
for i in $(seq 300); do grep -q initiator /run/wire-%[3]s.out && break; sleep 0.1; done
`, lab.SwitchNS, gbin, p, lab.NVMePort, lab.TargetAddr)
	}
	script += job("b3", 2, "randread") + job("b4", 3, "randwrite") + "wait $F\n"
	for _, p := range ports {
		script += fmt.Sprintf(`P=$(cat /run/wire-%[1]s.pid); kill -INT $P; while kill -0 $P 2>/dev/null; do sleep 0.1; done
cp /run/wire-%[1]s.pcap %[2]s/ && rm /run/wire-%[1]s.pcap; echo %[1]s $(tail -n 1 /run/wire-%[1]s.out)
`, p, dir)
	}
	start := time.Now()
	out := gexec(2*time.Minute, script)
	t.Logf("fio and the captures, %v:\n%s", time.Since(start).Round(time.Second), out)
	fio := map[wireKey]fioDir{}
	for _, h := range []struct {
		host string
		op   iscsipdu.Op
	}{{"b3", iscsipdu.OpRead}, {"b4", iscsipdu.OpWrite}} {
		b, err := os.ReadFile(filepath.Join(dir, "wire-"+h.host+".json"))
		if err != nil {
			t.Fatal(err)
		}
		l := parseFioLat(t, b)
		k := wireKey{lab.HostAddr(h.host), h.op}
		fio[k] = map[iscsipdu.Op]fioDir{iscsipdu.OpRead: l.read, iscsipdu.OpWrite: l.write}[h.op]
	}
	med := map[string]map[wireKey]float64{}
	for _, p := range ports {
		f, err := os.Open(filepath.Join(dir, "wire-"+p+".pcap"))
		if err != nil {
			t.Fatal(err)
		}
		w := wireLatencies(t, f)
		f.Close()
		med[p] = map[wireKey]float64{}
		for k, f := range fio {
			if own := hostPort(k); p == own && (f.n == 0 || len(w[k]) < f.n*95/100) {
				t.Errorf("%s: %d timed at %s, fio did %d", k, len(w[k]), p, f.n)
			}
			if len(w[k]) > 0 {
				med[p][k] = median(w[k])
				t.Logf("%s at %s: %d timed, median %.2f ms; fio's %d: clat p50 %.2f ms (%+.1f %%), lat p50 %.2f ms (%+.1f %%)",
					k, p, len(w[k]), med[p][k], f.n, f.p50, 100*(med[p][k]/f.p50-1), f.lat, 100*(med[p][k]/f.lat-1))
			}
		}
	}
	for k, f := range fio {
		own := hostPort(k)
		// fio's percentiles are its histogram's bins, within 1.6 %.
		if med["p-bm"][k] > med[own][k]*1.02 || med[own][k] > f.lat*1.03 {
			t.Errorf("%s: medians %.2f ms at p-bm, %.2f at %s, fio's lat %.2f: want them in that order (nested)", k, med["p-bm"][k], med[own][k], own, f.lat)
		}
		if math.Abs(med[own][k]/f.p50-1) > 0.25 {
			t.Errorf("%s: the wire's median at %s %.2f ms, fio's clat p50 %.2f ms: want within 25 %%", k, own, med[own][k], f.p50)
		}
	}
}

// hostPort is the bridge's port towards k's host.
func hostPort(k wireKey) string { return "p-b" + strings.TrimPrefix(k.host.String(), "10.99.0.") }
