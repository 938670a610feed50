package gateway

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/nat"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// TestTTLExpiredAnswered: a pod packet with TTL 1 is answered with ICMP
// time exceeded from the router address, encapsulated back to the pod's node
// with the tunnel type and VNI it came with, quoting the pod's packet.
func TestTTLExpiredAnswered(t *testing.T) {
	cases := []struct {
		name        string
		pod, server netip.Addr
		node        netip.Addr
		nodeMAC     [6]byte
		router      netip.Addr
		kind        Tunnel
	}{
		{"v4_over_v4_vxlan", pod1v4, server4, node1VTEP, node1MAC, router4, TunnelVXLAN},
		{"v6_over_v6_geneve", pod2v6, server6, node2VTEP, node2MAC, router6, TunnelGeneve},
		{"v4_over_v6_geneve", pod2v4, server4, node2VTEP, node2MAC, router4, TunnelGeneve},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, 64, testConfig())
			orig := pkt{src: c.pod, dst: c.server, ttl: 1, proto: "udp", sport: 33434, dport: 33435, payload: make([]byte, 700)}.build(t)
			tu := tun{outerSrc: c.node, outerDst: gwVTEP4, kind: c.kind, vni: 42}
			if c.node.Is6() {
				tu.outerDst = gwVTEP6
			}
			if c.kind == TunnelGeneve {
				tu.geneveOpts = geneveOpts()
			}
			r, out := f.run(t, tunnelFrame(t, tu, orig))
			mustTx(t, r, underlayHop.Ifindex)
			inner := checkEncap(t, out, c.node, c.nodeMAC, c.kind, 42)
			checkIPChecksums(t, "time exceeded", inner)
			p := gopacket.NewPacket(inner, ipLayerType(inner), gopacket.Default)
			src, dst, _ := ipOf(netLayers(p)[0])
			if src != c.router || dst != c.pod {
				t.Errorf("ICMP %v→%v, want %v→%v", src, dst, c.router, c.pod)
			}
			var quote []byte
			if c.pod.Is4() {
				ic := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
				if ic.TypeCode != layers.CreateICMPv4TypeCode(11, 0) {
					t.Errorf("type %v", ic.TypeCode)
				}
				quote = ic.Payload
				if len(inner) > maxICMPv4Error {
					t.Errorf("ICMPv4 error of %d bytes exceeds 576", len(inner))
				}
			} else {
				ic := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
				if ic.TypeCode != layers.CreateICMPv6TypeCode(3, 0) {
					t.Errorf("type %v", ic.TypeCode)
				}
				quote = ic.Payload[4:]
			}
			if !bytes.HasPrefix(orig, quote) || len(quote) < 28 {
				t.Errorf("quote (%d bytes) is not a prefix of the pod's packet", len(quote))
			}
			if f.ct.Len() != 0 {
				t.Error("an expired packet created a flow")
			}
			if s := f.p.Stats(); s.Count(CounterICMPSent) != 1 {
				t.Errorf("icmp sent %d", s.Count(CounterICMPSent))
			}
		})
	}
	t.Run("no_router_address", func(t *testing.T) {
		cfg := testConfig()
		cfg.RouterV4 = netip.Addr{}
		f := newFixture(t, 64, cfg)
		p := udpFrom(pod1v4, server4)
		p.ttl = 1
		if r, _ := f.run(t, tunnelFrame(t, podTun(), p.build(t))); r.Reason != DropTTLExpired {
			t.Fatalf("%v %v, want drop ttl_expired", r.Verdict, r.Reason)
		}
	})
}

// TestTooBigAnswered: a pod packet larger than the outside MTU with DF set
// (always for IPv6) is answered with frag-needed / packet-too-big carrying
// the MTU, so PMTU discovery works from the pod's side too.
func TestTooBigAnswered(t *testing.T) {
	for _, c := range []struct{ pod, server netip.Addr }{{pod1v4, server4}, {pod1v6, server6}} {
		f := newFixture(t, 64, testConfig())
		p := udpFrom(c.pod, c.server)
		p.payload, p.df = make([]byte, 1600), true
		r, out := f.run(t, tunnelFrame(t, podTun(), p.build(t)))
		mustTx(t, r, underlayHop.Ifindex)
		inner := checkEncap(t, out, node1VTEP, node1MAC, TunnelVXLAN, testVNI)
		checkIPChecksums(t, "too big", inner)
		pk := gopacket.NewPacket(inner, ipLayerType(inner), gopacket.Default)
		if c.pod.Is4() {
			ic := pk.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
			if ic.TypeCode != layers.CreateICMPv4TypeCode(3, 4) || ic.Seq != uint16(outHop.MTU) {
				t.Errorf("v4: %v mtu %d", ic.TypeCode, ic.Seq)
			}
		} else {
			ic := pk.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
			if ic.TypeCode != layers.CreateICMPv6TypeCode(2, 0) || binary.BigEndian.Uint32(ic.Payload) != uint32(outHop.MTU) {
				t.Errorf("v6: %v", ic.TypeCode)
			}
		}
		if f.ct.Len() != 0 {
			t.Error("a too-big packet created a flow")
		}
	}
}

// fragments splits a UDP/IPv4 packet built by gopacket into two fragments.
func fragments(t testing.TB, whole []byte, at int) (first, second []byte) {
	hl := int(whole[0]&0xf) * 4
	body := whole[hl:]
	mk := func(part []byte, off int, mf bool) []byte {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: whole[8], Protocol: layers.IPProtocol(whole[9]), Id: 0x4242,
			FragOffset: uint16(off / 8), SrcIP: whole[12:16], DstIP: whole[16:20]}
		if mf {
			ip.Flags = layers.IPv4MoreFragments
		}
		return serialize(t, ip, gopacket.Payload(part))
	}
	return mk(body[:at], 0, true), mk(body[at:], at, false)
}

// TestIPv4Fragments: the first fragment is NATed by its ports, the later one
// follows it (address only); the datagram reassembled from the output has a
// valid UDP checksum, in both directions.
func TestIPv4Fragments(t *testing.T) {
	f := newFixtureNAT(t, 64, testConfig(), func() nat.Config { c := nat.DefaultConfig(); c.PreservePort = false; return c }())
	payload := bytes.Repeat([]byte("0123456789abcdef"), 20)
	whole := pkt{src: pod1v4, dst: server4, proto: "udp", sport: 7000, dport: 9000, payload: payload}.build(t)
	f1, f2 := fragments(t, whole, 160)
	r, o1 := f.run(t, tunnelFrame(t, podTun(), f1))
	mustTx(t, r, outHop.Ifindex)
	o1 = append([]byte(nil), o1...)
	r, o2 := f.run(t, tunnelFrame(t, podTun(), f2))
	mustTx(t, r, outHop.Ifindex)
	for i, o := range [][]byte{o1, o2} {
		checkIPChecksums(t, "fragment header", o[14:34])
		if netip.AddrFrom4([4]byte(o[14+12:14+16])) != egress4 {
			t.Errorf("fragment %d source %v", i, o[14+12:14+16])
		}
	}
	natPort := binary.BigEndian.Uint16(o1[34:])
	// Reassemble and check the UDP checksum over the whole datagram.
	data := append(append([]byte(nil), o1[34:]...), o2[34:]...)
	if refSum(pseudo(egress4.AsSlice(), server4.AsSlice(), header.ProtoUDP, len(data)), data) != 0xffff {
		t.Error("reassembled outbound datagram has a bad UDP checksum")
	}

	// The reply, fragmented too.
	rwhole := pkt{src: server4, dst: egress4, proto: "udp", sport: 9000, dport: natPort, payload: payload}.build(t)
	r1, r2 := fragments(t, rwhole, 160)
	r, out := f.run(t, plainFrame(t, r1))
	mustTx(t, r, underlayHop.Ifindex)
	in1 := append([]byte(nil), checkEncap(t, out, node1VTEP, node1MAC, TunnelVXLAN, testVNI)...)
	r, out = f.run(t, plainFrame(t, r2))
	mustTx(t, r, underlayHop.Ifindex)
	in2 := checkEncap(t, out, node1VTEP, node1MAC, TunnelVXLAN, testVNI)
	if netip.AddrFrom4([4]byte(in2[16:20])) != pod1v4 || refSum(in2[:20]) != 0xffff {
		t.Errorf("later reply fragment: dst %v", in2[16:20])
	}
	data = append(append([]byte(nil), in1[20:]...), in2[20:]...)
	if binary.BigEndian.Uint16(data[2:]) != 7000 {
		t.Errorf("reply destination port %d, want 7000", binary.BigEndian.Uint16(data[2:]))
	}
	if refSum(pseudo(server4.AsSlice(), pod1v4.AsSlice(), header.ProtoUDP, len(data)), data) != 0xffff {
		t.Error("reassembled reply datagram has a bad UDP checksum")
	}
}

// TestSwapKeepsFlowsAndExpiry: flows survive a snapshot swap (with nodes
// renumbered), and Expire releases their NAT ports.
func TestSwapKeepsFlowsAndExpiry(t *testing.T) {
	f := newFixture(t, 64, testConfig())
	tu := tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelGeneve, vni: 9}
	if r, _ := f.run(t, tunnelFrame(t, tu, udpFrom(pod2v4, server4).build(t))); r.Verdict != VerdictTx {
		t.Fatal(r.Reason)
	}
	cfg := testConfig()
	cfg.Nodes[0], cfg.Nodes[1] = cfg.Nodes[1], cfg.Nodes[0] // node indexes change
	cfg.Nodes = append(cfg.Nodes, Node{Name: "node3", VTEP: netip.MustParseAddr("10.0.0.3")})
	s, err := NewSnapshot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.Swap(s); err != nil {
		t.Fatal(err)
	}
	rep := pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: 5000}
	r, out := f.run(t, plainFrame(t, rep.build(t)))
	mustTx(t, r, underlayHop.Ifindex)
	checkEncap(t, out, node2VTEP, node2MAC, TunnelGeneve, 9)

	ea := nat.Addr(addr16(egress4))
	if f.p.NAT().PortsInUse(ea, header.ProtoUDP) != 1 {
		t.Fatalf("ports in use %d before expiry", f.p.NAT().PortsInUse(ea, header.ProtoUDP))
	}
	later := testNow + int64(f.ct.Timeout(0)) + 24*3600e9
	if n := f.w.Expire(later, 100); n != 1 {
		t.Fatalf("expired %d flows, want 1", n)
	}
	if f.p.NAT().PortsInUse(ea, header.ProtoUDP) != 0 || f.ct.Len() != 0 {
		t.Errorf("after expiry: ports %d, flows %d", f.p.NAT().PortsInUse(ea, header.ProtoUDP), f.ct.Len())
	}
	if r := processOne(f.w, later, plainFrame(t, rep.build(t)), make([]byte, 2048)); r.Reason != DropNoFlow {
		t.Errorf("reply after expiry: %v %v", r.Verdict, r.Reason)
	}
	if s := f.p.Stats(); s.Count(CounterFlowsExpired) != 1 {
		t.Errorf("flows expired counter %d", s.Count(CounterFlowsExpired))
	}
}

// TestSnapshotErrors: invalid configurations are refused with a reason.
func TestSnapshotErrors(t *testing.T) {
	mut := map[string]func(*Config){
		"no routes":          func(c *Config) { c.Routes = nil },
		"two v4 vteps":       func(c *Config) { c.VTEPs = append(c.VTEPs, netip.MustParseAddr("10.0.0.9")) },
		"bad vtep":           func(c *Config) { c.VTEPs = []netip.Addr{{}} },
		"duplicate node":     func(c *Config) { c.Nodes[1].VTEP = node1VTEP },
		"node family":        func(c *Config) { c.VTEPs = c.VTEPs[:1] },
		"pod on two nodes":   func(c *Config) { c.Nodes[1].Pods = append(c.Nodes[1].Pods, Pod{Addr: pod1v4}) },
		"unknown policy":     func(c *Config) { c.Nodes[0].Pods[0].Policy = "nope" },
		"duplicate policy":   func(c *Config) { c.Policies = append(c.Policies, Policy{Name: "web"}) },
		"egress IP twice":    func(c *Config) { c.Policies[1].EgressIPs = append(c.Policies[1].EgressIPs, egress4) },
		"egress IP is VTEP":  func(c *Config) { c.Policies[1].EgressIPs = []netip.Addr{gwVTEP4} },
		"router wrong fam":   func(c *Config) { c.RouterV4 = router6 },
		"invalid egress IP":  func(c *Config) { c.Policies[0].EgressIPs = []netip.Addr{{}} },
		"unnamed policy":     func(c *Config) { c.Policies[0].Name = "" },
		"invalid pod":        func(c *Config) { c.Nodes[0].Pods[0].Addr = netip.Addr{} },
		"multicast node":     func(c *Config) { c.Nodes[0].VTEP = netip.MustParseAddr("224.0.0.1") },
		"loopback egress IP": func(c *Config) { c.Policies[0].EgressIPs = []netip.Addr{netip.MustParseAddr("127.0.0.1")} },
	}
	for name, m := range mut {
		cfg := testConfig()
		m(&cfg)
		if _, err := NewSnapshot(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	s, err := NewSnapshot(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if !s.Hosts(egress6) || s.Hosts(server4) {
		t.Error("Hosts")
	}
}
