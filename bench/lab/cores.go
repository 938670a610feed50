package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/lab"
)

// cpuNote says how the gateway's CPU is counted; the report prints it.
const cpuNote = "Cores: the generator, the receiver and the router's receive path run on the generator core; " +
	"the gateway on its own core: the NAPI thread of its eth0 (threaded NAPI, so the veth's receive work " +
	"leaves the sender's softirq) and, for Egret, every thread of `egret gateway`. Gateway CPU is that " +
	"core's busy time in /proc/stat (user+system+irq+softirq) over the trial, divided by the frames the " +
	"receiver counted: it includes the gateway's transmit into the fabric bridge up to the router's " +
	"veth, and anything else the shared machine ran on that core (the task figure in the JSON counts " +
	"only the gateway's own threads)."

// pinGateway gives the gateway its own core and moves the router's receive
// path onto the generator's: it turns on GRO (which gives a veth its NAPI
// instance when no XDP program does) and threaded NAPI on both interfaces,
// pins the new NAPI threads, and pins every thread of Egret's process. It
// returns the pids that count as the gateway's tasks and a line saying what
// it set up.
func pinGateway(l *lab.Lab, mode string, genCPU, gwCPU int) ([]int, string, error) {
	s := l.Spec
	// veth hands a frame to its peer's NAPI only when the sending side
	// has no TSO (or the peer forwards UDP GRO, which would merge the
	// flows): the bridge ports towards the gateway and the router.
	for _, port := range []string{"g1", s.Router.Name} {
		if out, err := exec.Command("ip", "netns", "exec", s.NS("fabric"), "ethtool", "-K", port, "tso", "off").CombinedOutput(); err != nil {
			return nil, "", fmt.Errorf("ethtool -K %s tso off: %v: %s", port, err, out)
		}
	}
	gwNAPI, err := threadedNAPI(s.NS("g1"), "eth0", gwCPU)
	if err != nil {
		return nil, "", fmt.Errorf("gateway g1: %w", err)
	}
	rtrNAPI, err := threadedNAPI(s.NS(s.Router.Name), "eth0", genCPU)
	if err != nil {
		return nil, "", fmt.Errorf("router: %w", err)
	}
	tasks := gwNAPI
	xdp := "none"
	if mode == lab.ModeEgret {
		st, err := l.Status()
		if err != nil {
			return nil, "", err
		}
		pid := 0
		for _, g := range st.Gateways {
			if g.Name == "g1" {
				pid = g.PID
			}
		}
		if pid == 0 {
			return nil, "", fmt.Errorf("no pid for egret gateway g1")
		}
		if err := pinProcess(pid, gwCPU); err != nil {
			return nil, "", err
		}
		tasks = append(tasks, pid)
		out, _ := exec.Command("ip", "-n", s.NS("g1"), "-d", "link", "show", "eth0").CombinedOutput()
		switch {
		case bytes.Contains(out, []byte("xdpgeneric")):
			xdp = "generic"
		case bytes.Contains(out, []byte("xdp")):
			xdp = "native"
		default:
			xdp = "none (AF_PACKET fallback)"
		}
	}
	return tasks, fmt.Sprintf("gateway core %d (NAPI threads %v), generator core %d (router NAPI threads %v), XDP %s",
		gwCPU, gwNAPI, genCPU, rtrNAPI, xdp), nil
}

// threadedNAPI switches dev in ns to threaded NAPI and pins the threads it
// creates to cpu.
func threadedNAPI(ns, dev string, cpu int) ([]int, error) {
	before := napiThreads()
	if out, err := exec.Command("ip", "netns", "exec", ns, "ethtool", "-K", dev, "gro", "on").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ethtool -K %s gro on: %v: %s", dev, err, out)
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /sys/class/net/"+dev+"/threaded").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("threaded NAPI on %s: %v: %s", dev, err, out)
	}
	var pids []int
	for pid := range napiThreads() {
		if !before[pid] {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("threaded NAPI on %s in %s started no napi/ thread", dev, ns)
	}
	for _, pid := range pids {
		if err := setAffinity(pid, cpu); err != nil {
			return nil, err
		}
	}
	return pids, nil
}

// napiThreads lists the kernel's threaded-NAPI threads.
func napiThreads() map[int]bool {
	m := map[int]bool{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
		if err == nil && strings.HasPrefix(string(b), "napi/") {
			m[pid] = true
		}
	}
	return m
}

func pinProcess(pid, cpu int) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, _ := strconv.Atoi(t.Name())
		if err := setAffinity(tid, cpu); err != nil {
			return err
		}
	}
	return nil
}

func setAffinity(tid, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(tid, &set); err != nil {
		return fmt.Errorf("pin thread %d to core %d: %w", tid, cpu, err)
	}
	return nil
}

// cmdIn runs a command with stdin.
func cmdIn(stdin, name string, args ...string) (string, error) {
	c := exec.Command(name, args...)
	c.Stdin = strings.NewReader(stdin)
	out, err := c.CombinedOutput()
	return string(out), err
}
