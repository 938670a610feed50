package engine_test

import (
	"bytes"
	"github.com/egret-gw/egret/gateway/config"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/nftables"

	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/engine"
	"github.com/egret-gw/egret/internal/nstest"
)

func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func defaultOptions() engine.Options { return engine.Options{} }

// startEngine runs the engine in-process inside the gateway namespace.
func startEngine(t *testing.T, tp *topo, cfg *config.Config, opt engine.Options) *engine.Engine {
	t.Helper()
	set, err := cfg.Settle()
	if err != nil {
		t.Fatal(err)
	}
	tp.gw.Enter(t)
	if opt.Logger == nil {
		opt.Logger = testLogger()
	}
	eng, err := engine.New(set, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	eng.Start()
	return eng
}

// waitStat polls the engine's counters until cond holds or a second passes.
func waitStat(t *testing.T, eng *engine.Engine, what string, cond func(engine.Stats) bool) engine.Stats {
	t.Helper()
	var s engine.Stats
	if !nstest.Soon(2*time.Second, func() bool { s = eng.Stats(); return cond(s) }) {
		t.Fatalf("%s: not reached; stats %+v", what, s)
	}
	return s
}

// TestEngine runs the engine in-process on a veth pair, on AF_XDP and on
// the AF_PACKET fallback, and checks what it puts on the wire.
func TestEngine(t *testing.T) {
	for _, mode := range []string{"afxdp", "afpacket"} {
		t.Run(mode, func(t *testing.T) { testEngine(t, mode) })
	}
}

// hasTable reports whether the inet nftables table name exists in the
// gateway's namespace.
func hasTable(t *testing.T, tp *topo, name string) bool {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(tp.gw.Handle)))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == name {
			return true
		}
	}
	return false
}

func testEngine(t *testing.T, mode string) {
	tp := newTopo(t)
	srv := tp.startServer(t)
	var skew atomic.Int64 // the expiry test moves the engine's clock forward
	start := time.Now()
	clock := func() int64 { return int64(time.Since(start)) + skew.Load() }
	cfg := tp.config()
	cfg.Mode = mode
	eng := startEngine(t, tp, cfg, engine.Options{Clock: clock})

	if m := eng.Modes()["d0"]; m != mode {
		t.Fatalf("d0 runs in %q mode, want %s", m, mode)
	}
	if tp.xdpAttached(t) != (mode == "afxdp") {
		t.Fatalf("XDP attached: %v in %s mode", tp.xdpAttached(t), mode)
	}
	if hasTable(t, tp, engine.NFTable) != (mode == "afpacket") {
		t.Fatalf("nftables table %s present: %v in %s mode", engine.NFTable, hasTable(t, tp, engine.NFTable), mode)
	}
	if !tp.hasAddr(t, egressIP) {
		t.Fatalf("egress IP %v not claimed on d0", egressIP)
	}

	// UDP: pod → server through the gateway, and the echo back into the tunnel.
	snat, reply := tp.udpRoundTrip(t, 40000, "hello egret", 20)
	if snat == nil {
		t.Fatal("no SNATed packet from the gateway seen on the wire")
	}
	if src := netip.MustParseAddr(snat.outer.SrcIP.String()); src != egressIP {
		t.Errorf("SNATed packet source %v, want egress IP %v", src, egressIP)
	}
	if snat.udp.SrcPort != 40000 {
		t.Errorf("SNATed source port %d, want the pod's 40000 (port preservation)", snat.udp.SrcPort)
	}
	if snat.outer.TTL != 63 {
		t.Errorf("SNATed TTL %d, want 63 (decremented once)", snat.outer.TTL)
	}
	if eth := snat.packet.LinkLayer().(*layers.Ethernet); !bytes.Equal(eth.DstMAC, tp.p0.MAC) || !bytes.Equal(eth.SrcMAC, tp.d0.MAC) {
		t.Errorf("SNATed frame %v → %v, want %v → %v", eth.SrcMAC, eth.DstMAC, tp.d0.MAC, tp.p0.MAC)
	}
	if reply == nil {
		t.Fatalf("no encapsulated reply reached the node; stats %+v", eng.Stats())
	}
	select {
	case from := <-srv.seen:
		if from != netip.AddrPortFrom(egressIP, 40000) {
			t.Errorf("server saw source %v, want %v:40000", from, egressIP)
		}
	default:
		t.Error("server saw nothing")
	}
	if s, d := reply.outer.SrcIP.String(), reply.outer.DstIP.String(); s != gwVTEP.String() || d != nodeVTEP.String() {
		t.Errorf("reply tunnel %s → %s, want %v → %v", s, d, gwVTEP, nodeVTEP)
	}
	if reply.vxlan.VNI != testVNI {
		t.Errorf("reply VNI %d, want %d", reply.vxlan.VNI, testVNI)
	}
	if !bytes.Equal(reply.ieth.DstMAC, nodeMAC) || !bytes.Equal(reply.ieth.SrcMAC, gwInnerMAC) {
		t.Errorf("reply inner Ethernet %v → %v, want %v → %v", reply.ieth.SrcMAC, reply.ieth.DstMAC, gwInnerMAC, nodeMAC)
	}
	if s, d := reply.inner.SrcIP.String(), reply.inner.DstIP.String(); s != serverIP.String() || d != podIP.String() {
		t.Errorf("reply inner %s → %s, want %v → %v", s, d, serverIP, podIP)
	}
	if reply.udp.SrcPort != serverPort || string(reply.udp.Payload) != "hello egret" {
		t.Errorf("reply UDP from port %d with %q, want %d with the echo", reply.udp.SrcPort, reply.udp.Payload, serverPort)
	}
	st := eng.Stats()
	// The gateway's kernel had never talked to the server: the first
	// packet met a missing neighbour, was dropped and counted, and the
	// kernel resolved it for the next one.
	if st.Kernel.NoNeighbour == 0 || st.Pipeline.Drop(gateway.DropNoRoute) == 0 {
		t.Errorf("no counted neighbour miss before the first forward: kernel %+v, no_route %d", st.Kernel, st.Pipeline.Drop(gateway.DropNoRoute))
	}
	if st.Pipeline.Count(gateway.CounterForwarded) == 0 || st.Pipeline.Count(gateway.CounterReplied) == 0 {
		t.Errorf("counters do not show the forward and the reply: %+v", st.Pipeline.Counters)
	}

	t.Run("icmp echo", func(t *testing.T) {
		ip := innerIP(podIP, serverIP, layers.IPProtocolICMPv4)
		icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 0x4242, Seq: 1}
		var got *decoded
		for try := 0; try < 10 && got == nil; try++ {
			tp.raw.Send(tp.tunnelFrame(t, nodeVTEP, ip, icmp, gopacket.Payload("ping")))
			got = tp.await(300*time.Millisecond, func(d *decoded) bool {
				return d.vxlan != nil && d.icmp != nil && d.icmp.TypeCode.Type() == layers.ICMPv4TypeEchoReply
			})
		}
		if got == nil {
			t.Fatal("no echo reply came back through the tunnel")
		}
		if got.icmp.Id != 0x4242 || got.inner.DstIP.String() != podIP.String() {
			t.Errorf("echo reply id %#x to %v, want 0x4242 to %v", got.icmp.Id, got.inner.DstIP, podIP)
		}
	})

	t.Run("tcp handshake", func(t *testing.T) {
		var ln net.Listener
		if err := tp.peer.Do(func() error {
			var err error
			ln, err = net.Listen("tcp4", netip.AddrPortFrom(serverIP, 8080).String())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ip := innerIP(podIP, serverIP, layers.IPProtocolTCP)
		syn := &layers.TCP{SrcPort: 41000, DstPort: 8080, Seq: 1000, SYN: true, Window: 64240}
		syn.SetNetworkLayerForChecksum(ip)
		var got *decoded
		for try := 0; try < 10 && got == nil; try++ {
			tp.raw.Send(tp.tunnelFrame(t, nodeVTEP, ip, syn))
			got = tp.await(300*time.Millisecond, func(d *decoded) bool {
				return d.vxlan != nil && d.tcp != nil && d.tcp.SYN && d.tcp.ACK
			})
		}
		if got == nil {
			t.Fatal("no SYN-ACK came back through the tunnel")
		}
		if got.tcp.DstPort != 41000 || got.tcp.Ack != 1001 || got.inner.DstIP.String() != podIP.String() {
			t.Errorf("SYN-ACK to %v:%d ack %d, want %v:41000 ack 1001", got.inner.DstIP, got.tcp.DstPort, got.tcp.Ack, podIP)
		}
	})

	t.Run("unsolicited and forged traffic dropped", func(t *testing.T) {
		before := eng.Stats().Pipeline
		var c *net.UDPConn
		if err := tp.peer.Do(func() error {
			var err error
			c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(serverIP, 7778)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.WriteToUDPAddrPort([]byte("knock"), netip.AddrPortFrom(egressIP, 40001)); err != nil {
			t.Fatal(err)
		}
		tp.raw.Send(tp.podUDP(t, strangerIP, podIP, 40002, "from a stranger"))
		tp.raw.Send(tp.podUDP(t, nodeVTEP, netip.MustParseAddr("10.244.9.9"), 40003, "spoofed"))
		tp.raw.Send(tp.podUDP(t, nodeVTEP, podUnsel, 40004, "not selected"))
		leaked := tp.await(400*time.Millisecond, func(d *decoded) bool {
			if d.vxlan != nil && d.udp != nil && d.udp.DstPort == 40001 {
				return true // the knock reached the pod
			}
			if d.icmp != nil && d.outer.SrcIP.String() == egressIP.String() {
				return true // the kernel answered for the egress IP
			}
			return d.vxlan == nil && d.udp != nil && d.udp.DstPort == serverPort && d.udp.SrcPort >= 40002
		})
		if leaked != nil {
			t.Fatalf("a packet that must be dropped got through: %v", leaked.packet)
		}
		waitStat(t, eng, "drops counted", func(s engine.Stats) bool {
			p := s.Pipeline
			return p.Drop(gateway.DropNoFlow) > before.Drop(gateway.DropNoFlow) &&
				p.Drop(gateway.DropUnknownVTEP) > before.Drop(gateway.DropUnknownVTEP) &&
				p.Drop(gateway.DropSpoofedSource) > before.Drop(gateway.DropSpoofedSource) &&
				p.Drop(gateway.DropNotSelected) > before.Drop(gateway.DropNotSelected)
		})
	})

	t.Run("reload keeps flows", func(t *testing.T) {
		second := netip.MustParseAddr("10.77.0.101")
		cfg := tp.config()
		cfg.Policies[0].EgressIPs = append(cfg.Policies[0].EgressIPs, second.String())
		cfg.Mode = mode
		set, err := cfg.Settle()
		if err != nil {
			t.Fatal(err)
		}
		flows := eng.Stats().Flows
		if err := eng.Reload(set); err != nil {
			t.Fatal(err)
		}
		if !tp.hasAddr(t, second) {
			t.Fatalf("new egress IP %v not claimed after reload", second)
		}
		if f := eng.Stats().Flows; f != flows {
			t.Errorf("flows %d after reload, want %d", f, flows)
		}
		// The existing UDP flow keeps its egress IP and port.
		for len(srv.seen) > 0 {
			<-srv.seen
		}
		tp.raw.Send(tp.podUDP(t, nodeVTEP, podIP, 40000, "again"))
		select {
		case from := <-srv.seen:
			if from != netip.AddrPortFrom(egressIP, 40000) {
				t.Errorf("after reload the flow left as %v, want %v:40000", from, egressIP)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("flow stopped working after reload")
		}
		cfg = tp.config()
		cfg.Mode = mode
		set, _ = cfg.Settle()
		if err := eng.Reload(set); err != nil {
			t.Fatal(err)
		}
		if tp.hasAddr(t, second) {
			t.Errorf("egress IP %v still on d0 after a reload removed it", second)
		}
	})

	t.Run("expiry", func(t *testing.T) {
		// Ten minutes later the UDP (5 min), ICMP (60 s) and half-open TCP
		// (4 min) flows are all gone and their ports released.
		if eng.Stats().Flows == 0 {
			t.Fatal("no flows to expire")
		}
		skew.Store(int64(10 * time.Minute))
		s := waitStat(t, eng, "flows expired", func(s engine.Stats) bool { return s.Flows == 0 })
		if s.Engine.Expired == 0 || s.Pipeline.Count(gateway.CounterFlowsExpired) == 0 {
			t.Errorf("flows gone but expiry not counted: engine %+v", s.Engine)
		}
	})

	if err := eng.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if tp.xdpAttached(t) {
		t.Error("XDP program still attached after Close")
	}
	if tp.hasAddr(t, egressIP) {
		t.Error("egress IP still on d0 after Close")
	}
	if hasTable(t, tp, engine.NFTable) {
		t.Errorf("nftables table %s left after Close", engine.NFTable)
	}
}
