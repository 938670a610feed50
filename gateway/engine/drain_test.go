package engine_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/engine"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/nat"
)

// TestRetiredEgressIPForgotten: an egress IP that leaves the configuration
// keeps its NAT state while a flow uses it, and loses it once the flow has
// expired. The allocator's per-IP exhaustion counter is the witness: it
// lives in that state, so it reads 0 only once the state is gone.
func TestRetiredEgressIPForgotten(t *testing.T) {
	tp := newTopo(t)
	tp.startServer(t)
	var skew atomic.Int64
	start := time.Now()
	nc := nat.DefaultConfig()
	nc.PortMin, nc.PortMax, nc.PreservePort = 1024, 1024, false // one port: a second flow to the server exhausts it
	cfg := tp.config()
	cfg.Mode = "afxdp"
	eng := startEngine(t, tp, cfg, engine.Options{NAT: &nc,
		Clock: func() int64 { return int64(time.Since(start)) + skew.Load() }})
	alloc := eng.Pipeline().NAT()
	key := nat.Addr(egressIP.As16())

	if _, reply := tp.udpRoundTrip(t, 40000, "first", 20); reply == nil {
		t.Fatalf("no reply through the gateway; stats %+v", eng.Stats())
	}
	tp.raw.Send(tp.podUDP(t, nodeVTEP, podIP, 40001, "second"))
	waitStat(t, eng, "second flow refused", func(s engine.Stats) bool { return s.Pipeline.Drop(gateway.DropNATExhausted) > 0 })
	if n := alloc.Exhausted(key); n == 0 {
		t.Fatal("the allocator counted no exhaustion on the egress IP")
	}

	// The egress IP leaves; its flow still holds the port.
	cfg = tp.config()
	cfg.Mode = "afxdp"
	cfg.Policies[0].EgressIPs = nil
	set, err := cfg.Settle()
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Reload(set); err != nil {
		t.Fatal(err)
	}
	// Reload tried to forget it at once; the same reload again is one more
	// pass, as the drain loop's next tick makes.
	if err := eng.Reload(set); err != nil {
		t.Fatal(err)
	}
	if alloc.Exhausted(key) == 0 {
		t.Fatal("NAT state of the retired egress IP forgotten while a flow still uses it")
	}

	// Its flow expires: the state goes.
	skew.Store(int64(10 * time.Minute))
	waitStat(t, eng, "flows expired", func(s engine.Stats) bool { return s.Flows == 0 })
	// The drain loop's ticks, not a reload, forget it now.
	nstest.Eventually(t, "the retired egress IP's NAT state forgotten after its flows expired", 5*time.Second,
		func() bool { return alloc.Exhausted(key) == 0 })
}
