package engine

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/gateway/config"
	"github.com/egret-gw/egret/gateway/nic"
)

// checkBusyPoll refuses busy-poll settings that cannot work: bad values,
// AF_PACKET mode, CPUs this process may not run on, or CPUs that would
// leave none for the rest of the process.
func checkBusyPoll(set *config.Settled, opt Options) error {
	if !opt.BusyPoll.On() {
		if len(opt.BusyPollCPUs) > 0 || opt.BusyPollNap != 0 {
			return errors.New("engine: busy-poll CPUs or nap given without busy polling")
		}
		return opt.BusyPoll.Check()
	}
	if err := opt.BusyPoll.Check(); err != nil {
		return err
	}
	if opt.BusyPollNap < 0 || opt.BusyPollNap >= opt.BusyPoll.GROFlushTimeout {
		return fmt.Errorf("engine: busy-poll nap %v: use 0 up to below the gro_flush_timeout (%v), or the kernel takes the device back meanwhile", opt.BusyPollNap, opt.BusyPoll.GROFlushTimeout)
	}
	if set.Mode == "afpacket" {
		return errors.New("engine: busy polling needs AF_XDP sockets; mode afpacket has none")
	}
	if len(opt.BusyPollCPUs) == 0 {
		return nil
	}
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return fmt.Errorf("engine: read the CPUs this process may use: %w", err)
	}
	seen := map[int]bool{}
	for _, c := range opt.BusyPollCPUs {
		switch {
		case c < 0 || !allowed.IsSet(c):
			return fmt.Errorf("engine: busy-poll CPU %d is not one this process may run on", c)
		case seen[c]:
			return fmt.Errorf("engine: busy-poll CPU %d given twice: one worker per core", c)
		}
		seen[c] = true
	}
	if allowed.Count() <= len(seen) {
		return fmt.Errorf("engine: busy-poll CPUs %v leave no CPU for the rest of the process (it may use %d)", opt.BusyPollCPUs, allowed.Count())
	}
	return nil
}

// keepOffCPUs moves every thread of the process off cpus. Threads made
// later inherit the mask of the thread that makes them, and the Go
// runtime makes new threads from a locked thread (a worker) through its
// template thread, which is one of those moved here: so only a worker's
// own thread (queueLoop.pin) runs on its core. What the kernel still runs
// there (its softirqs, other processes) is the node's cpuset's business
// (isolcpus, the kubelet's static CPU manager).
func keepOffCPUs(cpus []int) error {
	var rest unix.CPUSet
	if err := unix.SchedGetaffinity(0, &rest); err != nil {
		return err
	}
	for _, c := range cpus {
		rest.Clear(c)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &rest); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
		}
	}
	return errors.Join(errs...)
}

// pin binds the loop's (locked) thread to its CPU; the function it returns
// puts the thread's previous mask back before the thread is unlocked and
// reused for other goroutines.
func (l *queueLoop) pin() func() {
	var old, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return func() {}
	}
	one.Set(l.cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return func() {} // checkBusyPoll checked the CPU; a cpuset shrunk since
	}
	return func() { unix.SchedSetaffinity(0, &old) }
}

// logTxSkbBudget says whether XDP_MAX_TX_SKB_BUDGET took on ifc's sockets.
func (e *Engine) logTxSkbBudget(name string, ifc *nic.Interface) {
	if e.opt.TxSkbBudget == 0 {
		return
	}
	for _, q := range ifc.Queues {
		x, ok := q.(*nic.XSK)
		if !ok {
			continue
		}
		n, err := x.TxSkbBudget()
		switch {
		case err == nil:
			e.log.Info("engine: XDP_MAX_TX_SKB_BUDGET set", "interface", name, "budget", n)
		case errors.Is(err, nic.ErrKernelLacks):
			e.log.Info("engine: XDP_MAX_TX_SKB_BUDGET not set; the kernel's 32 frames per sendto apply", "interface", name, "reason", err)
		default:
			e.log.Warn("engine: XDP_MAX_TX_SKB_BUDGET not set; the kernel's 32 frames per sendto apply", "interface", name, "err", err)
		}
		return // the same on every queue of an interface
	}
}

// checkNAPI says, once per busy-polling socket and after its first frame,
// whether the socket has a NAPI instance to poll: without one (veth, and
// drivers that register their XDP queues without a NAPI id)
// recvfrom polls nothing, and the mode only defers the device's work by
// up to gro_flush_timeout. It runs until every socket was checked or the
// engine stops.
func (e *Engine) checkNAPI() {
	checked := map[*nic.XSK]bool{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-e.done:
			return
		case <-tick.C:
		}
		e.mu.Lock()
		var xs []*nic.XSK
		for _, ifc := range e.ifcs {
			for _, q := range ifc.Queues {
				if x, ok := q.(*nic.XSK); ok && !checked[x] && x.Stats().RxFrames > 0 {
					xs = append(xs, x)
				}
			}
		}
		e.mu.Unlock()
		for _, x := range xs {
			checked[x] = true
			switch id, err := x.NAPIID(); {
			case err != nil:
				e.log.Warn("engine: busy poll: cannot read the socket's NAPI id", "socket", x.Name(), "err", err)
			case id == 0:
				e.log.Warn("engine: busy poll cannot poll this device: its AF_XDP socket has no NAPI id (veth and some drivers); the mode only defers the device's work, by up to gro_flush_timeout",
					"socket", x.Name())
			default:
				e.log.Info("engine: busy polling", "socket", x.Name(), "napi_id", id)
			}
		}
	}
}
