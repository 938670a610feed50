package engine_test

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/engine"
	"github.com/egret-gw/egret/gateway/nic"
)

// TestEngineStatsForMetrics checks what the metrics collector reads from a
// running engine after real traffic over AF_XDP: per-worker counters that
// sum to the pipeline's, busy time that grew but stays below the time that
// passed, per-port frame and byte counters, the hosted egress IPs and the
// number of tunnel peers.
func TestEngineStatsForMetrics(t *testing.T) {
	tp := newTopo(t)
	tp.startServer(t)
	cfg := tp.config()
	cfg.Mode = "afxdp"
	cfg.Queues = 1
	began := time.Now()
	eng := startEngine(t, tp, cfg, defaultOptions())

	for i := range 5 {
		if snat, reply := tp.udpRoundTrip(t, uint16(41000+i), "stats", 20); snat == nil || reply == nil {
			t.Fatalf("round trip %d through the gateway failed; stats %+v", i, eng.Stats())
		}
	}
	s := waitStat(t, eng, "replies counted", func(s engine.Stats) bool {
		return s.Pipeline.Count(gateway.CounterReplied) >= 5
	})

	ws := eng.Workers(nil)
	if len(ws) != 1 {
		t.Fatalf("%d workers, want 1 (queues: 1)", len(ws))
	}
	var sum gateway.Stats
	var busy uint64
	for i := range ws {
		sum.Add(&ws[i].Pipeline)
		busy += ws[i].Engine.BusyNanos
	}
	if got, want := sum.Count(gateway.CounterForwarded), s.Pipeline.Count(gateway.CounterForwarded); got < want || got < 5 {
		t.Errorf("workers forwarded %d, the pipeline %d (at least 5 sent)", got, want)
	}
	if busy == 0 || busy > uint64(time.Since(began)) {
		t.Errorf("busy time %v after %v of running with traffic: want > 0 and less than the time passed",
			time.Duration(busy), time.Since(began))
	}
	if got := eng.Stats().Engine.BusyNanos; got < busy {
		t.Errorf("Stats().Engine.BusyNanos %d < the workers' %d", got, busy)
	}

	var ports []string
	eng.EachPort(func(iface string, p nic.Queue) {
		ports = append(ports, iface)
		st := p.Stats()
		if _, ok := p.(*nic.XSK); !ok {
			t.Errorf("port %s is %T, want an AF_XDP socket", p.Name(), p)
		}
		if st.RxFrames < 10 || st.TxFrames < 10 || st.RxBytes < 10*60 || st.TxBytes < 10*60 {
			t.Errorf("port %s counters %+v: want ≥ 10 frames and ≥ 600 bytes each way", p.Name(), st)
		}
	})
	if !slices.Equal(ports, []string{"d0"}) {
		t.Errorf("EachPort saw interfaces %v, want [d0]", ports)
	}
	if got := eng.Hosted(nil); !slices.Equal(got, []netip.Addr{egressIP}) {
		t.Errorf("Hosted %v, want [%v]", got, egressIP)
	}
	if n := eng.TunnelPeers(); n != len(cfg.Nodes) {
		t.Errorf("TunnelPeers %d, want %d", n, len(cfg.Nodes))
	}

	eng.Close()
	called := false
	eng.EachPort(func(string, nic.Queue) { called = true })
	if called {
		t.Error("EachPort called fn after Close: the sockets are gone")
	}
}
