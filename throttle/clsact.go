package throttle

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
)

// clsactHook is a tc BPF backend's hold on a device's clsact qdisc, the
// hooks its filters hang from. A clsact without filters costs nothing,
// but one left behind is still someone's: `tc qdisc show` lists it, and
// an operator cannot tell whether their own tooling or sanqos put it
// there. So a backend removes the clsact when it removes its last filter
// — only if it added the clsact itself: one that was there before (the
// operator's, Cilium's, another program's) stays, and so does one that
// holds anyone else's filters by then.
//
// Ownership lives in the process: after a crash, cleanup cannot tell
// whose an empty clsact is, and leaves it.
type clsactHook struct {
	ifindex int
	dev     string // for errors
	owned   bool   // we added the clsact
}

// ensure makes sure the device has a clsact, adding one (and owning it)
// if it has none. An ingress qdisc, which holds the same place, is
// someone's: it is refused, not replaced.
func (h *clsactHook) ensure() error {
	q, err := h.present()
	if err != nil {
		return err
	}
	switch {
	case q == "clsact":
		return nil
	case q != "":
		return fmt.Errorf("%s has an %s qdisc where clsact goes; remove it or pick another backend", h.dev, q)
	}
	c := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: h.ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := netlink.QdiscAdd(c); err != nil {
		if errors.Is(err, syscall.EEXIST) {
			return nil // someone added one meanwhile: theirs
		}
		return fmt.Errorf("clsact on %s: %w", h.dev, err)
	}
	h.owned = true
	return nil
}

// present is the kind of the qdisc in clsact's place ("" if none).
func (h *clsactHook) present() (string, error) {
	l, err := netlink.LinkByIndex(h.ifindex)
	if err != nil {
		return "", fmt.Errorf("device %s: %w", h.dev, err)
	}
	qs, err := netlink.QdiscList(l)
	if err != nil {
		return "", fmt.Errorf("qdiscs of %s: %w", h.dev, err)
	}
	for _, q := range qs {
		if q.Attrs().Parent == netlink.HANDLE_CLSACT {
			return q.Type(), nil
		}
	}
	return "", nil
}

// release removes the clsact if we added it and no filter is left on
// either of its hooks; call it after removing our own filters.
func (h *clsactHook) release() error {
	if h == nil || !h.owned {
		return nil
	}
	l, err := netlink.LinkByIndex(h.ifindex)
	if err != nil {
		h.owned = false // the device is gone, and its qdiscs with it
		return nil
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		fs, err := netlink.FilterList(l, parent)
		if err != nil {
			return fmt.Errorf("filters of %s: %w", h.dev, err)
		}
		if len(fs) > 0 {
			return nil // someone's filters: the clsact is theirs now too
		}
	}
	c := &netlink.Clsact{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: h.ifindex, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT}}
	if err := netlink.QdiscDel(c); err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("remove the clsact sanqos added to %s: %w", h.dev, err)
	}
	h.owned = false
	return nil
}
