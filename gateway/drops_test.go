package gateway

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/nat"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

func podTun() tun {
	return tun{outerSrc: node1VTEP, outerDst: gwVTEP4, kind: TunnelVXLAN, vni: testVNI}
}

func udpFrom(src, dst netip.Addr) pkt {
	return pkt{src: src, dst: dst, proto: "udp", sport: 5000, dport: 53, payload: []byte("q")}
}

// rawIP builds an IP packet with an arbitrary protocol and raw payload.
func rawIP(t testing.TB, src, dst netip.Addr, proto layers.IPProtocol, payload []byte) []byte {
	ipl, _ := ipLayers(pkt{src: src, dst: dst, ttl: 64}, proto)
	return serialize(t, ipl, gopacket.Payload(payload))
}

type dropCase struct {
	reason DropReason
	cfg    func(*Config)
	nat    func(*nat.Config)
	ct     func(*conntrack.Config)
	noSwap bool
	prep   func(t *testing.T, f *fixture)
	frame  func(t *testing.T) []byte
	outLen int
}

func dropCases() []dropCase {
	return []dropCase{
		{reason: DropMalformed, frame: func(t *testing.T) []byte {
			f := tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t))
			binary.BigEndian.PutUint16(f[14+50+2:], 2000) // inner total length beyond the frame
			return f
		}},
		{reason: DropSourceRoute, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), withIPv4Options(udpFrom(pod1v4, server4).build(t), srrOption(0x83)))
		}},
		{reason: DropBadTunnel, frame: func(t *testing.T) []byte {
			f := tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t))
			f[14+20+8] = 0 // VXLAN I flag cleared
			return f
		}},
		{reason: DropTunnelChecksum, frame: func(t *testing.T) []byte {
			f := tunnelFrame(t, tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelVXLAN, vni: testVNI}, udpFrom(pod2v4, server4).build(t))
			f[14+40+6], f[14+40+7] = 0, 0 // zero outer UDP checksum over IPv6
			return f
		}},
		{reason: DropGeneveCritical, frame: func(t *testing.T) []byte {
			tu := podTun()
			tu.kind, tu.geneveOpts, tu.geneveCritical = TunnelGeneve, geneveOpts(), true
			return tunnelFrame(t, tu, udpFrom(pod1v4, server4).build(t))
		}},
		{reason: DropUnsupportedProto, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), rawIP(t, pod1v4, server4, layers.IPProtocolSCTP, make([]byte, 32)))
		}},
		{reason: DropUnknownVTEP, frame: func(t *testing.T) []byte {
			tu := podTun()
			tu.outerSrc = netip.MustParseAddr("10.0.0.99")
			return tunnelFrame(t, tu, udpFrom(pod1v4, server4).build(t))
		}},
		{reason: DropSpoofedSource, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), udpFrom(pod2v4, server4).build(t)) // node 2's pod from node 1
		}},
		{reason: DropNotSelected, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), udpFrom(pod1Unsel, server4).build(t))
		}},
		{reason: DropNoEgressIP, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), udpFrom(pod1Nov6IP, server6).build(t))
		}},
		{reason: DropHairpin, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), udpFrom(pod1v4, egress4).build(t))
		}},
		{reason: DropDeniedDestination, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), udpFrom(pod1v4, netip.MustParseAddr("169.254.169.254")).build(t))
		}},
		{reason: DropTTLExpired, frame: func(t *testing.T) []byte {
			p := udpFrom(server4, egress4)
			p.ttl = 1
			return plainFrame(t, p.build(t))
		}},
		{reason: DropTCPNoFlow, frame: func(t *testing.T) []byte {
			// An RST: any other segment of an unknown flow is answered with
			// one (counted as tcp_no_flow too, TestResetForUnknownFlow).
			return tunnelFrame(t, podTun(), pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 40000, dport: 443, flags: "R"}.build(t))
		}},
		{reason: DropNoFlow, frame: func(t *testing.T) []byte {
			return plainFrame(t, udpFrom(server4, egress4).build(t))
		}},
		{reason: DropICMPType, frame: func(t *testing.T) []byte {
			ipl, _ := ipLayers(pkt{src: pod1v4, dst: server4, ttl: 64}, layers.IPProtocolICMPv4)
			ts := serialize(t, ipl, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(13, 0)}, gopacket.Payload(make([]byte, 12)))
			return tunnelFrame(t, podTun(), ts)
		}},
		{reason: DropConntrackFull, prep: func(t *testing.T, f *fixture) {
			// Fill the table with flows of another pod.
			for i := 0; f.ct.Len() < f.ct.Cap(); i++ {
				if i > f.ct.Cap()*4 {
					t.Fatalf("table does not fill: %d of %d", f.ct.Len(), f.ct.Cap())
				}
				p := udpFrom(pod2v4, server4)
				p.sport = uint16(10000 + i)
				tu := podTun()
				tu.outerSrc, tu.outerDst = node2VTEP, gwVTEP6
				if r, _ := f.run(t, tunnelFrame(t, tu, p.build(t))); r.Verdict != VerdictTx {
					t.Fatalf("filling flow %d: %v %v", i, r.Verdict, r.Reason)
				}
				answer(t, f, p.sport) // answered: early drop may not take it
			}
		}, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t))
		}},
		{reason: DropPodFlowLimit, ct: func(c *conntrack.Config) { c.SourceLimit = 1 }, prep: func(t *testing.T, f *fixture) {
			p := udpFrom(pod1v4, server4)
			if r, _ := f.run(t, tunnelFrame(t, podTun(), p.build(t))); r.Verdict != VerdictTx {
				t.Fatalf("first flow: %v %v", r.Verdict, r.Reason)
			}
			answer(t, f, p.sport) // answered: the pod may not early-drop it
		}, frame: func(t *testing.T) []byte {
			p := udpFrom(pod1v4, server4)
			p.sport++
			return tunnelFrame(t, podTun(), p.build(t))
		}},
		{reason: DropEgressIPFlowLimit, ct: func(c *conntrack.Config) { c.NATLimit = 1 }, prep: func(t *testing.T, f *fixture) {
			p := udpFrom(pod1v4, server4)
			if r, _ := f.run(t, tunnelFrame(t, podTun(), p.build(t))); r.Verdict != VerdictTx {
				t.Fatalf("first flow: %v %v", r.Verdict, r.Reason)
			}
			answer(t, f, p.sport) // answered: the egress IP may not early-drop it
		}, frame: func(t *testing.T) []byte {
			return fromNode2(t, udpFrom(pod2v4, server4)) // another pod, the same egress IP
		}},
		{reason: DropNATExhausted, nat: func(c *nat.Config) {
			c.PortMin, c.PortMax, c.PreservePort, c.PreserveParity = 20000, 20000, false, false
		}, prep: func(t *testing.T, f *fixture) {
			p := udpFrom(pod1v4, server4)
			p.sport = 6000
			if r, _ := f.run(t, tunnelFrame(t, podTun(), p.build(t))); r.Verdict != VerdictTx {
				t.Fatalf("first flow: %v %v", r.Verdict, r.Reason)
			}
		}, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t))
		}},
		{reason: DropFragNoFirst, frame: func(t *testing.T) []byte {
			ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, Id: 77, FragOffset: 100,
				SrcIP: pod1v4.AsSlice(), DstIP: server4.AsSlice()}
			return tunnelFrame(t, podTun(), serialize(t, ip, gopacket.Payload(make([]byte, 40))))
		}},
		// RFC 1858: a first fragment with the TCP ports but not the flags.
		{reason: DropFragTiny, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), rawFrag4(t, pod1v4, server4, layers.IPProtocolTCP, 78, 0, true, []byte{0x13, 0x88, 0, 80, 0, 0, 0, 1}))
		}},
		// RFC 3128: a fragment at offset 8 would rewrite the TCP flags of
		// a first fragment that passed every check.
		{reason: DropFragOverlap, prep: func(t *testing.T, f *fixture) {
			tcp := pkt{src: pod1v4, dst: server4, proto: "tcp", flags: "S", sport: 5000, dport: 80, payload: make([]byte, 20)}.build(t)
			if r, _ := f.run(t, tunnelFrame(t, podTun(), rawFrag4(t, pod1v4, server4, layers.IPProtocolTCP, 79, 0, true, tcp[20:60]))); r.Verdict != VerdictTx {
				t.Fatalf("first fragment: %v %v", r.Verdict, r.Reason)
			}
		}, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), rawFrag4(t, pod1v4, server4, layers.IPProtocolTCP, 79, 8, false, make([]byte, 16)))
		}},
		{reason: DropFragQuota, prep: func(t *testing.T, f *fixture) {
			for id := range f.w.frags.quota {
				if r, _ := f.run(t, tunnelFrame(t, podTun(), rawFrag4(t, pod1v4, server4, layers.IPProtocolUDP, uint16(id), 0, true, udpHead(16)))); r.Verdict != VerdictTx {
					t.Fatalf("first fragment %d: %v %v", id, r.Verdict, r.Reason)
				}
			}
		}, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), rawFrag4(t, pod1v4, server4, layers.IPProtocolUDP, 9999, 0, true, udpHead(16)))
		}},
		{reason: DropFragTableFull, prep: func(t *testing.T, f *fixture) {
			for i := range f.w.frags.slots { // every slot held by a live datagram of another source
				f.w.frags.slots[i] = fragEntry{key: fragKey{id: uint32(i), dir: fragIn}, live: true, expires: 1 << 62}
			}
		}, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), rawFrag4(t, pod1v4, server4, layers.IPProtocolUDP, 1, 0, true, udpHead(16)))
		}},
		{reason: DropNoRoute, cfg: func(c *Config) {
			c.Routes = route.NewStatic( // underlay only
				route.Static{Prefix: netip.MustParsePrefix("10.0.0.0/24"), Hop: underlayHop},
				route.Static{Prefix: netip.MustParsePrefix("fd00::/64"), Hop: underlayHop})
		}, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t))
		}},
		{reason: DropMTUExceeded, frame: func(t *testing.T) []byte {
			p := udpFrom(pod1v4, server4)
			p.payload = make([]byte, 1600) // DF clear: the gateway does not fragment
			return tunnelFrame(t, podTun(), p.build(t))
		}},
		{reason: DropOutBuffer, outLen: 30, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t))
		}},
		{reason: DropUnknownNode, prep: func(t *testing.T, f *fixture) {
			tu := podTun()
			tu.outerSrc, tu.outerDst = node2VTEP, gwVTEP6
			if r, _ := f.run(t, tunnelFrame(t, tu, udpFrom(pod2v4, server4).build(t))); r.Verdict != VerdictTx {
				t.Fatalf("flow from node 2: %v %v", r.Verdict, r.Reason)
			}
			cfg := testConfig()
			cfg.Nodes = cfg.Nodes[:1]
			s, err := NewSnapshot(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.p.Swap(s); err != nil {
				t.Fatal(err)
			}
		}, frame: func(t *testing.T) []byte {
			p := udpFrom(server4, egress4)
			p.sport, p.dport = 53, 5000
			return plainFrame(t, p.build(t))
		}},
		{reason: DropICMPRateLimited, prep: func(t *testing.T, f *fixture) {
			// The pod's burst of time-exceeded answers is used up.
			p := udpFrom(pod1v4, server4)
			p.ttl = 1
			fr := tunnelFrame(t, podTun(), p.build(t))
			for i := 0; i < icmpPodBurst; i++ {
				if r, _ := f.run(t, fr); r.Verdict != VerdictTx {
					t.Fatalf("time exceeded %d of the burst: %v %v", i, r.Verdict, r.Reason)
				}
			}
		}, frame: func(t *testing.T) []byte {
			p := udpFrom(pod1v4, server4)
			p.ttl = 1
			return tunnelFrame(t, podTun(), p.build(t))
		}},
		{reason: DropTunnelMismatch, cfg: func(c *Config) { c.Tunnels = []TunnelVNI{{TunnelVXLAN, testVNI + 1}} }, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t)) // another VNI
		}},
		{reason: DropTunnelMismatch, cfg: func(c *Config) { c.Tunnels = []TunnelVNI{{TunnelGeneve, testVNI}} }, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t)) // the other type
		}},
		// An IPv6 header carrying ::ffff:<pod IPv4> passed anti-spoofing as
		// the IPv4 pod and hit (and retired) the pod's IPv4 flow.
		{reason: DropBadAddress, prep: func(t *testing.T, f *fixture) {
			if r, _ := f.run(t, tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t))); r.Verdict != VerdictTx {
				t.Fatalf("IPv4 flow: %v %v", r.Verdict, r.Reason)
			}
		}, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), udpFrom(mapped(pod1v4), mapped(server4)).build(t))
		}},
		badAddrCase(func(t *testing.T) []byte { // inner IPv4-mapped source
			return tunnelFrame(t, podTun(), udpFrom(mapped(pod1v4), server6).build(t))
		}),
		badAddrCase(func(t *testing.T) []byte { // inner IPv4-mapped destination
			return tunnelFrame(t, podTun(), udpFrom(pod1v6, mapped(server4)).build(t))
		}),
		badAddrCase(func(t *testing.T) []byte { // outer IPv6 source ::ffff:<node 1 VTEP>
			tu := podTun()
			tu.outerSrc, tu.outerDst = mapped(node1VTEP), gwVTEP6
			return tunnelFrame(t, tu, udpFrom(pod1v4, server4).build(t))
		}),
		badAddrCase(func(t *testing.T) []byte { // outer IPv4 loopback source
			tu := podTun()
			tu.outerSrc = netip.MustParseAddr("127.0.0.2")
			return tunnelFrame(t, tu, udpFrom(pod1v4, server4).build(t))
		}),
		badAddrCase(func(t *testing.T) []byte { // outside multicast source to an egress IP
			return plainFrame(t, udpFrom(netip.MustParseAddr("224.0.0.9"), egress4).build(t))
		}),
		badAddrCase(func(t *testing.T) []byte { // outside IPv6 multicast source to an egress IP
			return plainFrame(t, udpFrom(netip.MustParseAddr("ff02::9"), egress6).build(t))
		}),
		{reason: DropDestNotOwned, cfg: func(c *Config) { *c = destConfig(nil, []netip.Addr{egressB}, nil) }, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), udpFrom(podDest, dstA).build(t))
		}},
		{reason: DropNoConfig, noSwap: true, frame: func(t *testing.T) []byte {
			return tunnelFrame(t, podTun(), udpFrom(pod1v4, server4).build(t))
		}},
	}
}

// TestDropReasons has one case per drop reason; each must drop exactly the
// last frame, with that reason, and count it once.
func TestDropReasons(t *testing.T) {
	seen := map[DropReason]bool{}
	for _, c := range dropCases() {
		seen[c.reason] = true
		t.Run(c.reason.String(), func(t *testing.T) {
			cfg := testConfig()
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			nc := nat.DefaultConfig()
			if c.nat != nil {
				c.nat(&nc)
			}
			maxFlows := 1024
			if c.reason == DropConntrackFull {
				maxFlows = 16
			}
			var f *fixture
			if c.noSwap {
				ct, err := conntrack.New(conntrack.Config{MaxFlows: maxFlows})
				if err != nil {
					t.Fatal(err)
				}
				p, err := NewPipeline(ct, nc)
				if err != nil {
					t.Fatal(err)
				}
				f = &fixture{p: p, w: p.NewProcessor(1), ct: ct}
			} else {
				ctCfg := conntrack.Config{MaxFlows: maxFlows}
				if c.ct != nil {
					c.ct(&ctCfg)
				}
				f = newFixtureCT(t, ctCfg, cfg, nc)
			}
			if c.prep != nil {
				c.prep(t, f)
			}
			before := f.p.Stats()
			n := c.outLen
			if n == 0 {
				n = 2048
			}
			flows := f.ct.Len()
			r := processOne(f.w, testNow, c.frame(t), make([]byte, n))
			if r.Verdict != VerdictDrop || r.Reason != c.reason {
				t.Fatalf("got %v/%v, want drop/%v", r.Verdict, r.Reason, c.reason)
			}
			after := f.p.Stats()
			for _, rr := range DropReasons() {
				want := before.Drop(rr)
				if rr == c.reason {
					want++
				}
				if after.Drop(rr) != want {
					t.Errorf("drop counter %v = %d, want %d", rr, after.Drop(rr), want)
				}
			}
			if f.ct.Len() != flows {
				t.Errorf("a dropped packet changed the flow count %d → %d", flows, f.ct.Len())
			}
		})
	}
	for _, r := range DropReasons() {
		if !seen[r] {
			t.Errorf("no test case for drop reason %v", r)
		}
	}
}

// TestFullTableKeepsFlows: when the table is full, new flows are dropped but
// existing ones keep working in both directions.
func TestFullTableKeepsFlows(t *testing.T) {
	f := newFixture(t, 16, testConfig())
	var last pkt
	for i := 0; f.ct.Len() < f.ct.Cap(); i++ {
		last = udpFrom(pod1v4, server4)
		last.sport = uint16(10000 + i)
		if r, _ := f.run(t, tunnelFrame(t, podTun(), last.build(t))); r.Verdict != VerdictTx {
			t.Fatalf("flow %d: %v %v", i, r.Verdict, r.Reason)
		}
		answer(t, f, last.sport) // answered: early drop may not take it
	}
	n := udpFrom(pod1v4, server4)
	n.sport = 9
	if r, _ := f.run(t, tunnelFrame(t, podTun(), n.build(t))); r.Reason != DropConntrackFull {
		t.Fatalf("new flow on a full table: %v %v", r.Verdict, r.Reason)
	}
	if r, _ := f.run(t, tunnelFrame(t, podTun(), last.build(t))); r.Verdict != VerdictTx {
		t.Fatalf("existing flow on a full table: %v %v", r.Verdict, r.Reason)
	}
	rep := pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: last.sport}
	if r, _ := f.run(t, plainFrame(t, rep.build(t))); r.Verdict != VerdictTx {
		t.Fatalf("reply of an existing flow on a full table: %v %v", r.Verdict, r.Reason)
	}
	if u := f.p.NAT().PortsInUse(nat.Addr(addr16(egress4)), header.ProtoUDP); u != f.ct.Len() {
		t.Errorf("ports in use %d, flows %d: the refused flow leaked a port", u, f.ct.Len())
	}
}

// TestPass: what is not for the gateway goes to the kernel untouched.
func TestPass(t *testing.T) {
	f := newFixture(t, 64, testConfig())
	arp := serialize(t, &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 1, 1, 1, 1, 1}, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4, Operation: 1,
			SourceHwAddress: []byte{2, 1, 1, 1, 1, 1}, SourceProtAddress: []byte{10, 0, 0, 2}, DstHwAddress: make([]byte, 6), DstProtAddress: []byte{10, 0, 0, 1}})
	otherVTEP := podTun()
	otherVTEP.outerDst = netip.MustParseAddr("10.0.0.50")
	for name, fr := range map[string][]byte{
		"arp":             arp,
		"ssh to the node": plainFrame(t, pkt{src: server4, dst: gwVTEP4, proto: "tcp", sport: 50000, dport: 22, flags: "S"}.build(t)),
		"other vtep":      tunnelFrame(t, otherVTEP, udpFrom(pod1v4, server4).build(t)),
	} {
		if r := processOne(f.w, testNow, fr, make([]byte, 2048)); r.Verdict != VerdictPass {
			t.Errorf("%s: %v %v, want pass", name, r.Verdict, r.Reason)
		}
	}
	if s := f.p.Stats(); s.Count(CounterPass) != 3 || s.Count(CounterRx) != 3 {
		t.Errorf("counters %+v", s.Counters)
	}
}

// TestFullTableOfExpiredFlowsMakesRoom: a table full of flows whose timers
// have run out, before the periodic sweep has reached them, still takes a
// new flow: the worker removes expired flows first (counted as expired,
// their ports released). A table full of live flows still refuses it with
// conntrack_full and keeps them, and a live flow among expired ones stays.
// The batched and the one-frame paths agree.
func TestFullTableOfExpiredFlowsMakesRoom(t *testing.T) {
	for _, single := range []bool{false, true} {
		t.Run(fmt.Sprintf("single=%v", single), func(t *testing.T) {
			f := newFixture(t, 16, testConfig())
			f.single = single
			out := make([][]byte, 1)
			out[0] = make([]byte, 2048)
			res := make([]Result, 1)
			send := func(now int64, sport uint16) Result {
				p := udpFrom(pod1v4, server4)
				p.sport = sport
				f.process(now, [][]byte{tunnelFrame(t, podTun(), p.build(t))}, out, res)
				return res[0]
			}
			for i := 0; f.ct.Len() < f.ct.Cap(); i++ {
				if r := send(testNow, uint16(10000+i)); r.Verdict != VerdictTx {
					t.Fatalf("flow %d: %v %v", i, r.Verdict, r.Reason)
				}
				answer(t, f, uint16(10000+i)) // answered: early drop may not take it
			}
			full := f.ct.Len()
			udp := int64(conntrack.DefaultTimeouts().UDP)
			// Live: refused, nothing removed.
			if r := send(testNow+udp/2, 9); r.Reason != DropConntrackFull {
				t.Fatalf("new flow on a table full of live flows: %v %v", r.Verdict, r.Reason)
			}
			// Keep flow 10000 alive; the others run out.
			if r := send(testNow+udp/2, 10000); r.Verdict != VerdictTx {
				t.Fatalf("existing flow: %v %v", r.Verdict, r.Reason)
			}
			later := testNow + udp + int64(time.Minute)
			if r := send(later, 9); r.Verdict != VerdictTx {
				t.Fatalf("new flow on a table full of expired flows: %v %v", r.Verdict, r.Reason)
			}
			st := f.w.Stats()
			if st.Count(CounterFlowsExpired) == 0 || f.ct.Len() > full {
				t.Fatalf("expired %d, flows %d (cap %d)", st.Count(CounterFlowsExpired), f.ct.Len(), f.ct.Cap())
			}
			if got := f.p.NAT().PortsInUse(nat.Addr(addr16(egress4)), header.ProtoUDP); got != f.ct.Len() {
				t.Errorf("ports in use %d, flows %d: a removed flow kept its port", got, f.ct.Len())
			}
			rep := pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: 10000, payload: []byte("a")}
			f.process(later, [][]byte{plainFrame(t, rep.build(t))}, out, res)
			if res[0].Verdict != VerdictTx {
				t.Fatalf("reply of the flow kept alive: %v %v", res[0].Verdict, res[0].Reason)
			}
		})
	}
}

func mapped(a netip.Addr) netip.Addr { return netip.AddrFrom16(a.As16()) }

// badAddrCase is a bad_address drop of frame, for the cases below.
func badAddrCase(frame func(t *testing.T) []byte) dropCase {
	return dropCase{reason: DropBadAddress, frame: frame}
}

// TestBadSourceAddresses: every special-purpose source that never appears
// on the wire is dropped at decode, inner and outer, before any table.
// Link-local sources are valid (RFC 6890) and are left to anti-spoofing.
func TestBadSourceAddresses(t *testing.T) {
	bad := []string{
		"0.0.0.0", "0.1.2.3", "127.0.0.1", "224.0.0.1", "239.1.2.3", "240.0.0.1", "255.255.255.255",
		"::", "::1", "::10.244.1.5", "::ffff:10.244.1.5", "ff02::1", "ff0e::1",
	}
	good := []string{"169.254.0.1", "fe80::1", "64:ff9b::a00:1", "1.2.3.4", "223.255.255.255", "2001:db8::1"}
	var p Parsed
	for _, s := range bad {
		a := netip.MustParseAddr(s)
		eg, dst := egress4, server4
		if !a.Is4() {
			eg, dst = egress6, server6
		}
		for _, fr := range [][]byte{
			plainFrame(t, udpFrom(a, eg).build(t)),
			tunnelFrame(t, podTun(), udpFrom(a, dst).build(t)),
		} {
			p.Decode(fr)
			if p.Kind != KindMalformed || p.Bad != DropBadAddress {
				t.Errorf("source %v: kind %v, reason %v; want bad_address", a, p.Kind, p.Bad)
			}
		}
	}
	for _, s := range good {
		a := netip.MustParseAddr(s)
		dst := server4
		if a.Is6() {
			dst = server6
		}
		p.Decode(tunnelFrame(t, podTun(), udpFrom(a, dst).build(t)))
		if p.Kind != KindTunnel {
			t.Errorf("inner source %v: kind %v, reason %v; want it decoded", a, p.Kind, p.Bad)
		}
		p.Decode(plainFrame(t, udpFrom(a, dst).build(t)))
		if p.Kind != KindIP {
			t.Errorf("source %v: kind %v, reason %v; want it decoded", a, p.Kind, p.Bad)
		}
	}
}
