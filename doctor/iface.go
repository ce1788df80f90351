package doctor

import (
	"fmt"
	"net"
	"strings"

	"github.com/sanqos/sanqos/throttle"
)

type linkFacts struct {
	links []Link
	err   error
}

func (e *Env) links() ([]Link, error) {
	if e.linkList == nil {
		l, err := e.Host.Links()
		e.linkList = &linkFacts{l, err}
	}
	return e.linkList.links, e.linkList.err
}

func (e *Env) link(name string) (Link, bool) {
	links, _ := e.links()
	for _, l := range links {
		if l.Name == name {
			return l, true
		}
	}
	return Link{}, false
}

// resolveDevice is the interface the agent would throttle on: the
// config's device, or throttle.ConsumerInterface's choice (the agent's
// own rule and message).
func (e *Env) resolveDevice() (string, error) {
	links, err := e.links()
	if err != nil {
		return "", fmt.Errorf("listing interfaces: %w", err)
	}
	if dev := e.configDevice(); dev != "" {
		if _, ok := e.link(dev); !ok {
			return "", fmt.Errorf("device %q (device: in the config) is not an interface here", dev)
		}
		return dev, nil
	}
	ifs := make([]net.Interface, len(links))
	for i, l := range links {
		ifs[i] = l.Interface
	}
	return throttle.ConsumerInterface(ifs)
}

func (e *Env) configDevice() string {
	if e.configured() {
		return e.Config.Device
	}
	return ""
}

func (e *Env) interfacesCheck() Result {
	links, err := e.links()
	if err != nil {
		return Result{Status: Fail, Summary: "cannot list interfaces: " + err.Error()}
	}
	p := e.plan()
	r := Result{Status: OK}
	for _, l := range links {
		if l.Flags&net.FlagLoopback != 0 {
			continue
		}
		state := "down"
		if l.Flags&net.FlagUp != 0 {
			state = "up"
		}
		mark := "  "
		if l.Name == p.device && p.deviceErr == nil {
			mark = "→ "
		}
		r.Detail = append(r.Detail, fmt.Sprintf("%s%-12s %-4s %s", mark, l.Name, state, orNone(strings.Join(l.Addrs, " "))))
	}
	switch {
	case p.deviceErr != nil && p.uses(throttle.PartDevice):
		r.Status, r.Summary = Fail, p.deviceErr.Error()
	case p.deviceErr != nil:
		r.Status = Warn
		r.Summary = fmt.Sprintf("%v (the %s backend needs no interface; edt, netem and htb would)", p.deviceErr, p.chosenOr("chosen"))
	case e.configDevice() != "":
		r.Summary = p.device + " (device: in the config)"
		if l, _ := e.link(p.device); l.Flags&net.FlagUp == 0 {
			r.Status, r.Summary = Warn, r.Summary+" is down"
		}
	default:
		r.Summary = p.device + ": the only non-loopback interface that is up, which the agent takes when no device: is given"
	}
	if !p.uses(throttle.PartDevice) && p.deviceErr == nil {
		r.Summary += fmt.Sprintf(" (not used by the %s backend)", p.chosenOr("chosen"))
	}
	if e.configured() && e.Config.Mode == "bridge" {
		ci := e.Config.CaptureInterface
		if _, ok := e.link(ci); !ok {
			r.Status = Fail
			r.Summary = fmt.Sprintf("capture_interface %q is not an interface here: bridge mode could not capture", ci)
		} else {
			r.Detail = append(r.Detail, "bridge mode captures on "+ci)
		}
	}
	return r
}
