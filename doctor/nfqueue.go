package doctor

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sanqos/sanqos/throttle"
)

// agentQueue is the NFQUEUE number the agent's delay line binds: the agent
// never sets throttle.DelayLineConfig.Queue, so it is the default, 0.
const agentQueue = 0

// boundQueues reads /proc/net/netfilter/nfnetlink_queue (one line per
// bound queue: number, the binder's netlink port id, ...; see
// net/netfilter/nfnetlink_queue.c, seq_show). The file is per network
// namespace, as are queues. ok is false when the file is missing: the
// kernel has no nfnetlink_queue, or it is a module not loaded yet (then
// nothing is bound).
func (h Host) boundQueues() (q map[int]uint32, ok bool, err error) {
	b, err := h.read("/proc/net/netfilter/nfnetlink_queue")
	if err != nil {
		return nil, false, nil
	}
	q = map[int]uint32{}
	for i, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			return nil, true, fmt.Errorf("nfnetlink_queue line %d: %q", i+1, l)
		}
		n, err1 := strconv.Atoi(f[0])
		port, err2 := strconv.ParseUint(f[1], 10, 32)
		if err1 != nil || err2 != nil || n < 0 || n > 65535 {
			return nil, true, fmt.Errorf("nfnetlink_queue line %d: %q", i+1, l)
		}
		q[n] = uint32(port)
	}
	return q, true, nil
}

// queueTaken is who holds the agent's queue, or "" when it is free. A
// second binder gets EBUSY from the kernel, so the delay line could not
// start.
func (e *Env) queueTaken() string {
	q, _, err := e.Host.boundQueues()
	if err != nil {
		return ""
	}
	port, ok := q[agentQueue]
	if !ok {
		return ""
	}
	who := fmt.Sprintf("netlink port %d", port)
	// A process' first netlink socket gets its pid as port id.
	if comm, err := e.Host.read(fmt.Sprintf("/proc/%d/comm", port)); err == nil {
		who += fmt.Sprintf(" (pid %d: %s)", port, strings.TrimSpace(string(comm)))
	}
	return who
}

func (e *Env) nfqueueCheck() Result {
	q, present, err := e.Host.boundQueues()
	uses := e.plan().uses(throttle.PartQueue)
	r := Result{Detail: []string{
		fmt.Sprintf("the delay line binds queue %d in the network namespace the agent starts in (this one)", agentQueue),
	}}
	switch {
	case err != nil:
		r.Status, r.Summary = Warn, "cannot read /proc/net/netfilter/nfnetlink_queue: "+err.Error()
		return r
	case !present && e.kernelFacts().state["nfqueue"] == loadable:
		r.Summary = "nfnetlink_queue is a module not loaded yet: no queue is bound"
		return r
	case !present:
		r.Summary = "no /proc/net/netfilter/nfnetlink_queue: this kernel has no nfnetlink_queue"
		if uses {
			r.Status = Fail
		}
		return r
	}
	for _, n := range slices.Sorted(maps.Keys(q)) {
		r.Detail = append(r.Detail, fmt.Sprintf("queue %d bound by netlink port %d", n, q[n]))
	}
	who := e.queueTaken()
	switch {
	case who == "":
		r.Summary = fmt.Sprintf("queue %d is free (%d bound in this namespace)", agentQueue, len(q))
	case uses:
		r.Status = Fail
		r.Summary = fmt.Sprintf("queue %d is taken by %s: the delay line could not bind it (another agent here?)", agentQueue, who)
	default:
		r.Status = OK
		r.Summary = fmt.Sprintf("queue %d is taken by %s, but the %s backend does not queue", agentQueue, who, e.plan().chosenOr("chosen"))
	}
	return r
}
