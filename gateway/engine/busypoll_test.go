package engine_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/gateway/engine"
	"github.com/egret-gw/egret/gateway/nic"
	"github.com/egret-gw/egret/internal/nstest"
)

func napiKnobs(t *testing.T) (deferIRQs, flush string) {
	t.Helper()
	read := func(k string) string {
		b, err := os.ReadFile("/sys/class/net/d0/" + k)
		if err != nil {
			t.Fatal(err)
		}
		return string(bytes.TrimSpace(b))
	}
	return read("napi_defer_hard_irqs"), read("gro_flush_timeout")
}

// TestEngineBusyPoll runs the engine with busy polling on a veth: the
// interface's NAPI knobs hold the mode's values while it runs and their
// old ones after Close, and a pod's UDP goes out SNATed and its echo comes
// back while the worker spins instead of sleeping in poll(2).
func TestEngineBusyPoll(t *testing.T) {
	tp := newTopo(t)
	set, err := tp.config().Settle()
	if err != nil {
		t.Fatal(err)
	}
	tp.gw.Enter(t)
	nstest.MountSysfs(t)
	oldDefer, oldFlush := napiKnobs(t)
	// As the bench lab sets its gateway's eth0: GRO on and threaded NAPI,
	// so that its NAPI runs (and has an id) before XDP attaches.
	if out, err := exec.Command("nsenter", "--net="+tp.gw.Path(), "ethtool", "-K", "d0", "gro", "on").CombinedOutput(); err != nil {
		t.Fatalf("ethtool: %v: %s", err, out)
	}
	if err := os.WriteFile("/sys/class/net/d0/threaded", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	logger := slog.New(slog.NewTextHandler(io.MultiWriter(os.Stderr, &log), nil))
	eng, err := engine.New(set, engine.Options{Logger: logger, BusyPoll: nic.DefaultBusyPoll, TxSkbBudget: 64})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			eng.Close()
		}
	}()
	eng.Start()
	if d, f := napiKnobs(t); d != "2" || f != "200000" {
		t.Fatalf("napi_defer_hard_irqs %s, gro_flush_timeout %s while busy polling; want 2, 200000", d, f)
	}
	tp.startServer(t)
	snat, reply := tp.udpRoundTrip(t, 40000, "hello busy egret", 20)
	if snat == nil || reply == nil {
		t.Fatalf("round trip through the busy-polling gateway: SNATed %v, reply %v; stats %+v", snat != nil, reply != nil, eng.Stats())
	}
	// A veth's XDP queue has no NAPI id, even with its NAPI running
	// before: the engine must say that busy polling has nothing to poll.
	nstest.Until(t, "the engine says the veth socket has no NAPI to busy-poll", 5*time.Second, func() (bool, string) {
		return strings.Contains(log.String(), "has no NAPI id"), ""
	})
	closed = true
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	if d, f := napiKnobs(t); d != oldDefer || f != oldFlush {
		t.Fatalf("after Close napi_defer_hard_irqs %s, gro_flush_timeout %s; want %s, %s back", d, f, oldDefer, oldFlush)
	}
}

// TestEngineBusyPollRefused: settings busy polling cannot run with are
// refused before anything is opened.
func TestEngineBusyPollRefused(t *testing.T) {
	tp := &topo{}
	c := tp.config()
	c.Mode = "afpacket"
	set, err := c.Settle()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opt  engine.Options
		want string
	}{
		{engine.Options{BusyPoll: nic.DefaultBusyPoll}, "needs AF_XDP"},
		{engine.Options{BusyPollCPUs: []int{0}}, "without busy polling"},
		{engine.Options{BusyPollNap: 1}, "without busy polling"},
		{engine.Options{BusyPoll: nic.BusyPoll{Usecs: 20}}, "budget 0"},
	} {
		if _, err := engine.New(set, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error saying %q", tc.opt, err, tc.want)
		}
	}
}

// cpusAllowed maps each thread of this process to its Cpus_allowed_list.
func cpusAllowed(t *testing.T) map[string]string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				out[task.Name()] = strings.TrimSpace(v)
			}
		}
	}
	return out
}

// TestEngineBusyPollPinsWorker: with BusyPollCPUs the worker's thread runs
// on its CPU alone and every other thread of the process is kept off it;
// after Close no thread is left on it alone.
func TestEngineBusyPollPinsWorker(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	last := -1
	for c := 0; c < 1024; c++ {
		if all.IsSet(c) {
			last = c
		}
	}
	if all.Count() < 2 {
		t.Skip("needs two CPUs: one for the worker, one for the rest")
	}
	// The engine moves every thread of the process: give them all back.
	t.Cleanup(func() {
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			if tid, err := strconv.Atoi(task.Name()); err == nil {
				unix.SchedSetaffinity(tid, &all)
			}
		}
	})
	tp := newTopo(t)
	set, err := tp.config().Settle()
	if err != nil {
		t.Fatal(err)
	}
	tp.gw.Enter(t)
	nstest.MountSysfs(t)
	eng, err := engine.New(set, engine.Options{Logger: testLogger(), BusyPoll: nic.DefaultBusyPoll, BusyPollCPUs: []int{last}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			eng.Close()
		}
	}()
	eng.Start()
	want := strconv.Itoa(last)
	nstest.Until(t, "the worker alone on CPU "+want, 5*time.Second, func() (bool, string) {
		m := cpusAllowed(t)
		on, others := 0, 0
		for _, v := range m {
			switch {
			case v == want:
				on++
			case cpuListHas(v, last):
				others++
			}
		}
		return on == 1 && others == 0, fmt.Sprintf("threads' CPUs %v", m)
	})
	closed = true
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	for tid, v := range cpusAllowed(t) {
		if v == want {
			t.Fatalf("thread %s still pinned to CPU %s after Close", tid, want)
		}
	}
}

// cpuListHas reports whether a Cpus_allowed_list ("0-1,3") holds cpu.
func cpuListHas(list string, cpu int) bool {
	for _, part := range strings.Split(list, ",") {
		lo, hi, found := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		b := a
		if found {
			if b, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		if cpu >= a && cpu <= b {
			return true
		}
	}
	return false
}
