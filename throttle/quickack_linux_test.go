package throttle

import (
	"net"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The quickack metric goes on the consumers' interface's connected route
// only, leaves the route otherwise as it was, and comes off on Restore.
func TestQuickAckOnConnectedRoutes(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	l, err := netlink.LinkByName(n.devA)
	if err != nil {
		t.Fatal(err)
	}
	_, far, _ := net.ParseCIDR("192.0.2.0/24")
	routed := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: far, Gw: net.ParseIP("10.201.0.254")}
	if err := netlink.RouteAdd(routed); err != nil {
		t.Fatal(err)
	}
	routes := func() map[string]netlink.Route {
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: l.Attrs().Index, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]netlink.Route{}
		for _, r := range rs {
			out[r.Dst.String()] = r
		}
		return out
	}
	before := routes()
	q, err := EnableQuickAck(n.devA, nil)
	if err != nil {
		t.Fatal(err)
	}
	on := routes()
	if got := q.Routes(); len(got) != 1 || got[0] != "10.201.0.0/24" {
		t.Errorf("quickack set on %v, want the connected 10.201.0.0/24 only", got)
	}
	c, b := on["10.201.0.0/24"], before["10.201.0.0/24"]
	if c.QuickACK != 1 || c.Protocol != b.Protocol || c.Scope != b.Scope || !c.Src.Equal(b.Src) || c.Priority != b.Priority {
		t.Errorf("connected route with quickack: %+v, was %+v", c, b)
	}
	if on["192.0.2.0/24"].QuickACK != 0 {
		t.Errorf("the route via a router got quickack: %+v", on["192.0.2.0/24"])
	}
	if err := q.Restore(); err != nil {
		t.Fatal(err)
	}
	if r := routes()["10.201.0.0/24"]; r.QuickACK != 0 || !r.Src.Equal(b.Src) {
		t.Errorf("after Restore: %+v", r)
	}
	// Enabling again on a route that has it already (the operator's, or
	// a crashed agent's) changes nothing, and so Restore leaves it.
	c.QuickACK = 1
	if err := netlink.RouteChange(&c); err != nil {
		t.Fatal(err)
	}
	q, err = EnableQuickAck(n.devA, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Restore(); err != nil {
		t.Fatal(err)
	}
	if r := routes()["10.201.0.0/24"]; r.QuickACK != 1 {
		t.Errorf("Restore took off a quickack it did not set: %+v", r)
	}
}

// Routes is the routes it set the metric on.
func (q *QuickAck) Routes() []string {
	var out []string
	for _, r := range q.routes {
		out = append(out, r.Dst.String())
	}
	return out
}
