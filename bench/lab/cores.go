package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/lab"
)

// cpuNote says how the gateway's CPU is counted; the report prints it.
const cpuNote = "The gateway's threads, the generator and the receiver run SCHED_FIFO, each pinned to its core, " +
	"so other work on the shared machine yields to them (it keeps 5 % of each core). " +
	"Cores: the generator and the receiver run on the generator core; " +
	"the gateway on its own core: the NAPI thread of its eth0 (threaded NAPI, so the veth's receive work " +
	"leaves the sender's softirq) and, for Egret, every thread of `egret gateway`. The gateway's transmit " +
	"carries each frame on through the fabric bridge to the router's eth0, where the receiver's AF_PACKET " +
	"tap copies it and an nftables ingress rule drops it, on the gateway's core and in its time, the same " +
	"work for both sides. Gateway CPU per packet is the time /proc/<pid>/stat charges to those threads " +
	"(the NAPI thread, egret's threads; without IRQ time accounting a softirq is charged to the thread it " +
	"interrupts) over the trial, divided by the frames the receiver counted; the gateway core's total busy " +
	"time is in the JSON too (it also holds whatever else the shared machine ran there)."

// pinGateway gives the gateway its own core: it turns on GRO (which gives
// a veth its NAPI instance when no XDP program does) and threaded NAPI on
// the gateway's interface, pins the new NAPI thread, and pins every thread
// of Egret's process. The path from the gateway to the receiver (fabric
// bridge, router's eth0, where the receiver taps and the router drops) has
// no NAPI of its own, so it runs on the gateway's core inside its transmit,
// for both sides alike: no queue there can overflow unseen. It
// returns the pids that count as the gateway's tasks and a line saying what
// it set up.
func pinGateway(l *lab.Lab, gw string, egret bool, genCPU int, gwCPUs []int) ([]int, string, error) {
	s := l.Spec
	// veth hands a frame to its peer's NAPI only when the sending side
	// has no TSO (or the peer forwards UDP GRO, which would merge the
	// flows): the bridge port towards the gateway.
	if out, err := exec.Command("ip", "netns", "exec", s.NS("fabric"), "ethtool", "-K", gw, "tso", "off").CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("ethtool -K %s tso off: %v: %s", gw, err, out)
	}
	gwNAPI, err := threadedNAPI(s.NS(gw), "eth0", gwCPUs, prioNAPI)
	if err != nil {
		return nil, "", fmt.Errorf("gateway %s: %w", gw, err)
	}
	tasks := gwNAPI
	xdp := "none"
	if egret {
		st, err := l.Status()
		if err != nil {
			return nil, "", err
		}
		pid := 0
		for _, g := range st.Gateways {
			if g.Name == gw {
				pid = g.PID
			}
		}
		if pid == 0 {
			return nil, "", fmt.Errorf("no pid for egret gateway %s", gw)
		}
		if err := pinProcess(pid, gwCPUs, prioGateway); err != nil {
			return nil, "", err
		}
		tasks = append(tasks, pid)
	}
	// What is on the interface (Egret's program, a reflector's, or none).
	out, _ := exec.Command("ip", "-n", s.NS(gw), "-d", "link", "show", "eth0").CombinedOutput()
	switch {
	case bytes.Contains(out, []byte("xdpgeneric")):
		xdp = "generic"
	case bytes.Contains(out, []byte("xdp")):
		xdp = "native"
	case egret:
		xdp = "none (AF_PACKET fallback)"
	}
	return tasks, fmt.Sprintf("gateway cores %v (NAPI threads %v, one per queue), generator and receiver core %d, XDP %s",
		gwCPUs, gwNAPI, genCPU, xdp), nil
}

// threadedNAPI switches dev in ns to threaded NAPI and pins the threads it
// creates (one per receive queue, in the order the kernel started them) to
// cpus in turn.
func threadedNAPI(ns, dev string, cpus []int, prio int) ([]int, error) {
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
	slices.Sort(pids)
	for i, pid := range pids {
		if err := setAffinity(pid, cpus[i%len(cpus):i%len(cpus)+1], prio); err != nil {
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

// pinProcess pins every thread of pid to cpus (any of them).
func pinProcess(pid int, cpus []int, prio int) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, _ := strconv.Atoi(t.Name())
		if err := setAffinity(tid, cpus, prio); err != nil {
			return err
		}
	}
	return nil
}

// Scheduling of the measured threads. On a shared machine a thread of the
// default class waits for its turn behind other work for milliseconds, and
// a veth's 256-frame receive ring overflows meanwhile: the gateway's
// threads run SCHED_FIFO (its NAPI thread above its process, as an
// interrupt is above the driver's consumer), and so do the generator and,
// above it so that it preempts it, the receiver. The kernel's throttling
// leaves other work 5 % of each core meanwhile.
const (
	prioNAPI      = 51
	prioGateway   = 50
	prioReceiver  = 50
	prioGenerator = 49
	// prioWriter is the NAT log writer's, on the generator's core
	// (placeWriter): below everything measured there.
	prioWriter = 1
)

// setAffinity pins thread tid to cpus and gives it SCHED_FIFO at prio.
func setAffinity(tid int, cpus []int, prio int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(tid, &set); err != nil {
		return fmt.Errorf("pin thread %d to cores %v: %w", tid, cpus, err)
	}
	attr := unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
	if err := unix.SchedSetAttr(tid, &attr, 0); err != nil {
		return fmt.Errorf("scheduling class of thread %d: %w", tid, err)
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
