package engine_test

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

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
