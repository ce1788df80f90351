package throttle

import (
	"net"
	"strings"
	"testing"
)

func TestConsumerInterface(t *testing.T) {
	lo := net.Interface{Name: "lo", Flags: net.FlagUp | net.FlagLoopback}
	up := func(n string) net.Interface { return net.Interface{Name: n, Flags: net.FlagUp} }
	down := net.Interface{Name: "ifb0"}
	for _, tc := range []struct {
		name string
		ifs  []net.Interface
		want string // name, or a substring of the error
		err  bool
	}{
		{"one up beside loopback and a down ifb", []net.Interface{lo, down, up("eth0")}, "eth0", false},
		{"two up", []net.Interface{lo, up("eth0"), up("eth1")}, "among [eth0 eth1]: give --device (or device: in the config)", true},
		{"none up", []net.Interface{lo, down}, "among []", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ConsumerInterface(tc.ifs)
			if tc.err {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %q, %v; want an error with %q", got, err, tc.want)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
