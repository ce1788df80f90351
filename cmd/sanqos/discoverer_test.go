package main

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/discover"
)

// One agent throttles and samples one TCP port (iscsi_port), while nvmet
// may export on several (the guest's fixture: 4420 and 4421) and one
// host may serve iSCSI on 3260 beside. Discovery finds the hosts of
// every nvmet port; the agent says, once per set, which ports it leaves
// alone.
func TestNVMeHostsForSaysWhichPortsAreNotThrottled(t *testing.T) {
	n, err := discover.ReadNVMet(filepath.Join("..", "..", "discover", "testdata", "nvmet-guest", "nvmet"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		port int
		want []uint16
	}{
		{4420, []uint16{4421}},
		{4421, []uint16{4420}},
		{3260, []uint16{4420, 4421}}, // iSCSI's port: nvmet's hosts are all unthrottled
	} {
		if got := unthrottledPorts(n, c.port); !reflect.DeepEqual(got, c.want) {
			t.Errorf("iscsi_port %d: unthrottled %v, want %v", c.port, got, c.want)
		}
	}
	var buf bytes.Buffer
	calls := 0
	hosts := nvmeHostsFor(4420, slog.New(slog.NewTextHandler(&buf, nil)), func(discover.NVMet) ([]discover.NVMeConn, error) {
		calls++
		return nil, nil
	})
	for range 3 {
		if _, err := hosts(n); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 3 {
		t.Errorf("next called %d times, want 3", calls)
	}
	if got := strings.Count(buf.String(), "level=WARN"); got != 1 || !strings.Contains(buf.String(), "ports=[4421]") {
		t.Errorf("want one warning naming port 4421, got %d:\n%s", got, buf.String())
	}
	buf.Reset()
	single := n
	single.Ports = n.Ports[:1] // 4420 only: nothing to say
	if _, err := nvmeHostsFor(4420, slog.New(slog.NewTextHandler(&buf, nil)), func(discover.NVMet) ([]discover.NVMeConn, error) { return nil, nil })(single); err != nil || buf.Len() > 0 {
		t.Errorf("one port, the throttled one: err %v, log %q", err, buf.String())
	}
}
