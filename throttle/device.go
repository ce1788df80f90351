package throttle

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// ConsumerInterface picks the interface towards the consumers when none is
// configured: the only non-loopback interface that is up, the common case
// on a target (and in the lab's bm namespace). With several it refuses to
// guess, because throttling on the wrong one delays nobody and looks like
// a controller that does not work. The agent and `sanqos doctor` both ask
// it, so they agree on the answer and on the message.
func ConsumerInterface(ifs []net.Interface) (string, error) {
	var names []string
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback == 0 && i.Flags&net.FlagUp != 0 {
			names = append(names, i.Name)
		}
	}
	if len(names) != 1 {
		return "", fmt.Errorf("cannot tell the interface towards the consumers among %v: give --device (or device: in the config)", names)
	}
	return names[0], nil
}

// linkSpeed reads the link speed from sysfs (Mbit/s); devices without one
// (or "-1") get MaxRate.
func linkSpeed(dev string) uint64 {
	b, err := os.ReadFile("/sys/class/net/" + dev + "/speed")
	if err != nil {
		return MaxRate
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v <= 0 {
		return MaxRate
	}
	return min(uint64(v)*1e6/8, MaxRate)
}
