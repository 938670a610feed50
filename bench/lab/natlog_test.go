package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/egret-gw/egret/gateway/natlog"
	"github.com/egret-gw/egret/internal/nstest"
)

func TestNATLogCostTable(t *testing.T) {
	rep := &report{Results: []*result{
		sideResult(sideNATLogOff, "cps", 1000, 2000, 100),
		sideResult(sideNATLogOff, "est-10k", 800, 900, 120),
		sideResult(sideNATLogOn, "cps", 960, 2000, 104),
		sideResult(sideSyncOn, "est-10k", 10, 10, 1),
	}}
	rep.Results[2].NATLog = &natlogStats{Written: 5000, Dropped: 3, FlowsNew: 2600, WriterNsPerRecord: 312.4}
	got := rep.natlogCost()
	if !strings.Contains(got, "| cps | 0.96x | 1.00x | 1.04x | 5000 / 3 | 2600 | 312 |") {
		t.Fatalf("no cps row with the ratios on/off:\n%s", got)
	}
	if strings.Contains(got, "est-10k |") {
		t.Fatalf("a row for a scenario only one side ran:\n%s", got)
	}
	checkColumns(t, got)
	if !strings.Contains(rep.tables(), got) {
		t.Fatal("the tables leave out the NAT log's cost")
	}
}

// TestPlaceWriter: the NAT log writer's thread of a running log (this
// process's own) is found by its name, moved to the given core at the
// lowest real-time priority, and its CPU read; a process without a writer is an error,
// not a side measured with the writer among the workers.
func TestPlaceWriter(t *testing.T) {
	nstest.Root(t) // a real-time class
	if _, err := placeWriter([]int{os.Getpid()}, 0); err == nil {
		t.Fatal("placeWriter found a writer in a process that runs no NAT log")
	}
	l, err := natlog.New(natlog.Config{Dir: t.TempDir(), Gateway: "gw-a", Every: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	var tids []int
	nstest.Eventually(t, "the writer's thread is up", 10*time.Second, func() bool {
		tids, err = placeWriter([]int{os.Getpid()}, 0)
		return err == nil
	})
	if len(tids) != 1 {
		t.Fatalf("writer threads %v, want one", tids)
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(tids[0], &set); err != nil {
		t.Fatal(err)
	}
	if set.Count() != 1 || !set.IsSet(0) {
		t.Fatalf("writer thread %d may run on %d cores (core 0: %v), want core 0 only", tids[0], set.Count(), set.IsSet(0))
	}
	attr, err := unix.SchedGetAttr(tids[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	if attr.Policy != unix.SCHED_FIFO || attr.Priority != prioWriter {
		t.Fatalf("writer thread %d scheduling policy %d priority %d, want SCHED_FIFO %d", tids[0], attr.Policy, attr.Priority, prioWriter)
	}
	// Run spins a drain per millisecond: its thread has spent CPU.
	nstest.Eventually(t, "the writer's CPU is read", 10*time.Second, func() bool { return threadCPU(tids) > 0 })
}
