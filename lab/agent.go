package lab

import (
	"bufio"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sanqos/sanqos/agent"
	"github.com/sanqos/sanqos/report"
)

// SanqosBinary is the sanqos executable the lab runs inside namespaces
// (the agent in bm). Tests point it at a freshly built binary.
var SanqosBinary = ""

// SanqosExecutable is the sanqos the lab runs: SanqosBinary, else the
// product binary named sanqos beside this process's executable (bin/sanqos
// beside bin/sanqos-lab), so the lab measures the binary an operator
// installs, which has no lab in it.
func SanqosExecutable() (string, error) {
	if SanqosBinary != "" {
		return SanqosBinary, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(filepath.Dir(self), "sanqos")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("the lab runs the agent from the sanqos binary beside %s: %w (go build -o %s ./cmd/sanqos)", self, err, bin)
	}
	return bin, nil
}

// LabAgent is an agent running in the target namespace for an experiment.
type LabAgent struct {
	*agent.Client
	cmd    *exec.Cmd
	exited chan struct{}
	log    string
	// use, if set, adds the agent's CPU and wall seconds when it stops
	// (CountUse).
	use     *AgentUse
	started time.Time
}

// AgentFlags are added to every agent the lab starts (`lab run
// --agent-flag`), e.g. a delay line option for experiments that run the
// agent without a config.
var AgentFlags []string

// StartAgent runs `sanqos agent` inside bm with the given backend and extra
// arguments, and waits until its socket answers.
func StartAgent(backend string, dir string, extra ...string) (*LabAgent, error) {
	return StartAgentNamed("agent", backend, dir, extra...)
}

// StartAgentNamed runs an agent whose socket and log are named name, so a
// second (shadow) agent can run beside the first.
func StartAgentNamed(name, backend string, dir string, extra ...string) (*LabAgent, error) {
	return StartAgentIn(TargetNS, name, backend, dir, extra...)
}

// StartAgentIn runs the agent in namespace ns: bm (target mode) or sqlan
// (bridge mode, on the switch between initiators and target).
func StartAgentIn(ns, name, backend string, dir string, extra ...string) (*LabAgent, error) {
	bin, err := SanqosExecutable()
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(StateDir, name+".sock")
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := []string{"netns", "exec", ns, bin, "agent", "--backend", backend, "--socket", sock, "--label", "sanqos-lab-" + name}
	// Over NVMe/TCP every agent throttles nvmet's port, config or none
	// (the oracle's and the throttle figures' agents have none).
	if s, err := LoadState(); err == nil && s.Options.TargetKind() == TargetNVMet {
		args = append(args, "--iscsi-port", strconv.Itoa(NVMePort))
	}
	args = append(args, AgentFlags...)
	args = append(args, extra...)
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the run dies, SIGTERM the agent so it removes its throttles
	// (ip netns exec hands the process over to the agent by exec, which
	// keeps the parent-death signal).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	a := &LabAgent{Client: agent.NewClient(sock), cmd: cmd, exited: exited, log: logPath, started: time.Now()}
	err = WaitFor("agent socket", 10*time.Second, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	select {
	case <-exited:
		b, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("agent exited at start: %s", b)
	default:
	}
	if err != nil {
		a.Stop()
		return nil, err
	}
	return a, nil
}

// Pid is the agent's process id (ip netns exec replaces itself with it).
func (a *LabAgent) Pid() int { return a.cmd.Process.Pid }

// Stop ends the agent the orderly way (SIGTERM: it releases held packets
// and removes its rules) and waits for it.
func (a *LabAgent) Stop() error {
	if a.cmd.Process == nil {
		return nil
	}
	if a.use != nil {
		*a.use = a.use.Add(AgentUse{CPUSeconds(a.Pid()), time.Since(a.started).Seconds()})
		a.use = nil
	}
	// ip netns exec replaces itself with the agent, so the pid is the agent's.
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
		return nil
	case <-time.After(10 * time.Second * Slowdown()):
		a.cmd.Process.Kill()
		<-a.exited
		return fmt.Errorf("agent did not stop on SIGTERM (see %s)", a.log)
	}
}

// CountUse adds the agent's CPU and wall seconds to *u when it stops.
func (a *LabAgent) CountUse(u *AgentUse) { a.use = u }

// Kill ends the agent with SIGKILL: no cleanup of any kind runs.
func (a *LabAgent) Kill() {
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
}

// Alive reports whether the agent process still runs.
func (a *LabAgent) Alive() bool {
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

// Warnings counts the agent's WARN and ERROR log lines so far.
func (a *LabAgent) Warnings() int {
	f, err := os.Open(a.log)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			n++
		}
	}
	return n
}

// AgentUse adds up the CPU and wall time of agents, read as each stops
// (LabAgent.CountUse): what an experiment reports as its agent's CPU.
type AgentUse struct{ CPU, Wall float64 } // seconds

// Add is u with v's seconds added.
func (u AgentUse) Add(v AgentUse) AgentUse { return AgentUse{u.CPU + v.CPU, u.Wall + v.Wall} }

// Pct is the agents' CPU as a percentage of one core while they ran.
func (u AgentUse) Pct() float64 {
	if u.Wall <= 0 {
		return 0
	}
	return report.Round(100*u.CPU/u.Wall, 2)
}

// CPUSeconds is a process's user+system CPU time, its waited-for
// children's (tgtadm, tc, iptables) included.
func CPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return math.NaN()
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 15 {
		return math.NaN()
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	cu, _ := strconv.ParseFloat(f[13], 64)
	cs, _ := strconv.ParseFloat(f[14], 64)
	return (u + st + cu + cs) / 100 // USER_HZ
}
