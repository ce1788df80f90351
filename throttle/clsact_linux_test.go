package throttle

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// clsactOf is the kind of the qdisc in clsact's place on dev ("" none).
func clsactOf(t *testing.T, dev string) string {
	t.Helper()
	l, err := netlink.LinkByName(dev)
	if err != nil {
		t.Fatal(err)
	}
	kind, err := (&clsactHook{ifindex: l.Attrs().Index, dev: dev}).present()
	if err != nil {
		t.Fatal(err)
	}
	return kind
}

// The write caps add the device's clsact when it has none and remove it
// with their filters; a clsact that was there before is someone's, and
// stays, with the filters hung from it.
func TestWriteCapClsactOwnership(t *testing.T) {
	for _, before := range []bool{false, true} {
		t.Run(map[bool]string{false: "none before", true: "someone's before"}[before], func(t *testing.T) {
			n := newTCTestNet(t)
			n.enterA(t)
			if before {
				n.inA(t, "tc", "qdisc", "add", "dev", n.devA, "clsact")
				n.inA(t, "tc", "filter", "add", "dev", n.devA, "egress", "prio", "1", "u32", "match", "u32", "0", "0", "flowid", "1:1")
			}
			w, err := NewWriteCap(WriteCapConfig{tcConfig: tcConfig{Device: n.devA, Label: n.label, Ports: []uint16{n.port}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Set(map[netip.Addr]Setting{n.addrsB[0]: {WriteRate: 1 << 20}}); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			assertWriteCapGone(t, n)
			got := clsactOf(t, n.devA)
			switch {
			case before && got != "clsact":
				t.Error("the clsact that was there before is gone")
			case before && !strings.Contains(n.inA(t, "tc", "filter", "show", "dev", n.devA, "egress"), "u32"):
				t.Error("the filter on the clsact that was there before is gone")
			case !before && got != "":
				t.Errorf("an empty %s left behind by the write caps", got)
			}
		})
	}
}

// A clsact we added but someone has hung a filter from since is theirs
// too: released, it stays. One we added and nobody else uses goes.
func TestClsactHookKeepsOneInUse(t *testing.T) {
	n := newTCTestNet(t)
	n.enterA(t)
	l, err := netlink.LinkByName(n.devA)
	if err != nil {
		t.Fatal(err)
	}
	h := &clsactHook{ifindex: l.Attrs().Index, dev: n.devA}
	if err := h.ensure(); err != nil || !h.owned {
		t.Fatalf("ensure on a device without clsact: owned %v, %v", h.owned, err)
	}
	n.inA(t, "tc", "filter", "add", "dev", n.devA, "ingress", "prio", "1", "u32", "match", "u32", "0", "0", "flowid", "1:1")
	if err := h.release(); err != nil {
		t.Fatal(err)
	}
	if clsactOf(t, n.devA) != "clsact" {
		t.Fatal("a clsact with someone's filter removed")
	}
	n.inA(t, "tc", "filter", "del", "dev", n.devA, "ingress")
	if err := h.release(); err != nil {
		t.Fatal(err)
	}
	if q := clsactOf(t, n.devA); q != "" {
		t.Errorf("our unused clsact left: %s", q)
	}
	// An ingress qdisc holds clsact's place: refused, not replaced.
	n.inA(t, "tc", "qdisc", "add", "dev", n.devA, "ingress")
	h = &clsactHook{ifindex: l.Attrs().Index, dev: n.devA}
	if err := h.ensure(); err == nil || h.owned {
		t.Errorf("ensure over an ingress qdisc: owned %v, %v", h.owned, err)
	}
	if q := clsactOf(t, n.devA); q != "ingress" {
		t.Errorf("the ingress qdisc became %q", q)
	}
}
