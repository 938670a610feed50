package gateway

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/nat"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

const testVNI = 0x123456

func (f *fixture) run(t *testing.T, frame []byte) (Result, []byte) {
	t.Helper()
	out := make([]byte, 2048)
	r := processOne(f.w, testNow, frame, out)
	if r.Verdict == VerdictTx {
		return r, out[:r.Len]
	}
	return r, nil
}

func mustTx(t *testing.T, r Result, ifindex int) {
	t.Helper()
	if r.Verdict != VerdictTx {
		t.Fatalf("verdict %v (reason %v), want tx", r.Verdict, r.Reason)
	}
	if r.Ifindex != ifindex {
		t.Fatalf("ifindex %d, want %d", r.Ifindex, ifindex)
	}
}

func ipOf(l gopacket.Layer) (src, dst netip.Addr, ttl uint8) {
	switch ip := l.(type) {
	case *layers.IPv4:
		s, _ := netip.AddrFromSlice(ip.SrcIP)
		d, _ := netip.AddrFromSlice(ip.DstIP)
		return s, d, ip.TTL
	case *layers.IPv6:
		s, _ := netip.AddrFromSlice(ip.SrcIP)
		d, _ := netip.AddrFromSlice(ip.DstIP)
		return s, d, ip.HopLimit
	}
	return netip.Addr{}, netip.Addr{}, 0
}

// netLayers returns the IP layers of a decoded packet, outermost first.
func netLayers(p gopacket.Packet) []gopacket.Layer {
	var ls []gopacket.Layer
	for _, l := range p.Layers() {
		if l.LayerType() == layers.LayerTypeIPv4 || l.LayerType() == layers.LayerTypeIPv6 {
			ls = append(ls, l)
		}
	}
	return ls
}

func l4Ports(t *testing.T, p gopacket.Packet, proto string) (sport, dport uint16) {
	t.Helper()
	switch proto {
	case "tcp":
		l, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if !ok {
			t.Fatal("no TCP layer")
		}
		return uint16(l.SrcPort), uint16(l.DstPort)
	case "udp":
		var l *layers.UDP
		for _, x := range p.Layers() {
			if u, ok := x.(*layers.UDP); ok {
				l = u // innermost
			}
		}
		if l == nil {
			t.Fatal("no UDP layer")
		}
		return uint16(l.SrcPort), uint16(l.DstPort)
	default:
		if l, ok := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4); ok {
			return l.Id, 0
		}
		if l, ok := p.Layer(layers.LayerTypeICMPv6Echo).(*layers.ICMPv6Echo); ok {
			return l.Identifier, 0
		}
		t.Fatal("no ICMP echo layer")
	}
	return 0, 0
}

// checkEncap verifies the tunnel headers of a frame the gateway sent to a
// node and returns the inner IP packet.
func checkEncap(t *testing.T, frame []byte, nodeVTEP netip.Addr, nodeMAC [6]byte, kind Tunnel, vni uint32) []byte {
	t.Helper()
	p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if el := p.ErrorLayer(); el != nil {
		t.Fatalf("output does not decode: %v", el.Error())
	}
	eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if [6]byte(eth.DstMAC) != underlayHop.DstMAC || [6]byte(eth.SrcMAC) != underlayHop.SrcMAC {
		t.Errorf("outer MACs %v→%v", eth.SrcMAC, eth.DstMAC)
	}
	nls := netLayers(p)
	if len(nls) != 2 {
		t.Fatalf("want outer and inner IP, got %d IP layers", len(nls))
	}
	osrc, odst, _ := ipOf(nls[0])
	wantSrc := gwVTEP4
	if nodeVTEP.Is6() {
		wantSrc = gwVTEP6
	}
	if osrc != wantSrc || odst != nodeVTEP {
		t.Errorf("outer %v→%v, want %v→%v", osrc, odst, wantSrc, nodeVTEP)
	}
	var udp *layers.UDP
	for _, l := range p.Layers() {
		if u, ok := l.(*layers.UDP); ok {
			udp = u
			break
		}
	}
	if udp == nil {
		t.Fatal("no outer UDP")
	}
	if udp.SrcPort < 49152 {
		t.Errorf("outer UDP source port %d not in the dynamic range", udp.SrcPort)
	}
	outerIP := frame[14:]
	if nodeVTEP.Is4() {
		if refSum(outerIP[:20]) != 0xffff {
			t.Error("bad outer IPv4 header checksum")
		}
		if tl := int(binary.BigEndian.Uint16(outerIP[2:])); tl != len(outerIP) {
			t.Errorf("outer total length %d, frame has %d", tl, len(outerIP))
		}
	} else {
		u := outerIP[40:]
		if refSum(pseudo(outerIP[8:24], outerIP[24:40], header.ProtoUDP, len(u)), u) != 0xffff {
			t.Error("bad outer UDP checksum over IPv6")
		}
	}
	switch kind {
	case TunnelVXLAN:
		vx, ok := p.Layer(layers.LayerTypeVXLAN).(*layers.VXLAN)
		if !ok || udp.DstPort != header.VXLANPort {
			t.Fatalf("not VXLAN (dport %d)", udp.DstPort)
		}
		if !vx.ValidIDFlag || vx.VNI != vni {
			t.Errorf("VXLAN VNI %#x valid %v, want %#x", vx.VNI, vx.ValidIDFlag, vni)
		}
	case TunnelGeneve:
		g, ok := p.Layer(layers.LayerTypeGeneve).(*layers.Geneve)
		if !ok || udp.DstPort != header.GenevePort {
			t.Fatalf("not Geneve (dport %d)", udp.DstPort)
		}
		if g.VNI != vni || g.Version != 0 || g.CriticalOption || g.OAMPacket || g.Protocol != layers.EthernetTypeTransparentEthernetBridging {
			t.Errorf("Geneve header %+v", g)
		}
	}
	var inner *layers.Ethernet
	for _, l := range p.Layers() {
		if e, ok := l.(*layers.Ethernet); ok {
			inner = e
		}
	}
	if inner == nil || inner == eth {
		t.Fatal("no inner Ethernet")
	}
	if [6]byte(inner.DstMAC) != nodeMAC || [6]byte(inner.SrcMAC) != gwInnerMAC {
		t.Errorf("inner MACs %v→%v", inner.SrcMAC, inner.DstMAC)
	}
	return inner.Payload
}

type flowCase struct {
	name     string
	pod      netip.Addr
	node     netip.Addr
	nodeMAC  [6]byte
	server   netip.Addr
	egress   netip.Addr
	proto    string
	kind     Tunnel
	vlan     uint16
	errorSrc netip.Addr
}

func flowCases() []flowCase {
	var cs []flowCase
	for _, proto := range []string{"tcp", "udp", "echo"} {
		for _, kind := range []Tunnel{TunnelVXLAN, TunnelGeneve} {
			kn := map[Tunnel]string{TunnelVXLAN: "vxlan", TunnelGeneve: "geneve"}[kind]
			cs = append(cs,
				flowCase{proto + "_v4_" + kn + "_over_v4", pod1v4, node1VTEP, node1MAC, server4, egress4, proto, kind, 0, netip.MustParseAddr("203.0.113.1")},
				flowCase{proto + "_v6_" + kn + "_over_v4", pod1v6, node1VTEP, node1MAC, server6, egress6, proto, kind, 100, netip.MustParseAddr("2001:db8:eeee::1")},
				flowCase{proto + "_v4_" + kn + "_over_v6", pod2v4, node2VTEP, node2MAC, server4, egress4, proto, kind, 0, netip.MustParseAddr("203.0.113.1")},
				flowCase{proto + "_v6_" + kn + "_over_v6", pod2v6, node2VTEP, node2MAC, server6, egress6, proto, kind, 0, netip.MustParseAddr("2001:db8:eeee::1")},
			)
		}
	}
	return cs
}

func (c flowCase) tun() tun {
	tu := tun{outerSrc: c.node, outerDst: gwVTEP4, kind: c.kind, vni: testVNI, vlan: c.vlan}
	if c.node.Is6() {
		tu.outerDst = gwVTEP6
	}
	if c.kind == TunnelGeneve {
		tu.geneveOpts = geneveOpts()
	}
	return tu
}

// TestForwardReplyICMPError sends a pod packet out, the server's reply back
// and an ICMP error about the pod packet, for every protocol, family,
// tunnel type and tunnel family, and checks every output field and checksum
// with gopacket and a reference checksum.
func TestForwardReplyICMPError(t *testing.T) {
	for _, preserve := range []bool{true, false} {
		for _, c := range flowCases() {
			name := c.name
			if !preserve {
				name += "_random_port"
			}
			t.Run(name, func(t *testing.T) { testFlowCase(t, c, preserve) })
		}
	}
}

func testFlowCase(t *testing.T, c flowCase, preserve bool) {
	{
		{
			nc := nat.DefaultConfig()
			nc.PreservePort = preserve
			f := newFixtureNAT(t, 1024, testConfig(), nc)
			payload := []byte("hello egress, this is the pod speaking")
			podPort, srvPort := uint16(40000), uint16(443)
			if c.proto == "echo" {
				srvPort = 0
			}
			orig := pkt{src: c.pod, dst: c.server, ttl: 64, proto: c.proto, sport: podPort, dport: srvPort, flags: "S", payload: payload}.build(t)
			r, out := f.run(t, tunnelFrame(t, c.tun(), orig))
			mustTx(t, r, outHop.Ifindex)

			// Forward: Ethernet to the next hop, SNATed, TTL-1.
			p := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
			if el := p.ErrorLayer(); el != nil {
				t.Fatalf("forward output does not decode: %v", el.Error())
			}
			eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			if [6]byte(eth.DstMAC) != outHop.DstMAC || [6]byte(eth.SrcMAC) != outHop.SrcMAC {
				t.Errorf("forward MACs %v→%v", eth.SrcMAC, eth.DstMAC)
			}
			src, dst, ttl := ipOf(netLayers(p)[0])
			if src != c.egress || dst != c.server || ttl != 63 {
				t.Errorf("forward IP %v→%v ttl %d, want %v→%v ttl 63", src, dst, ttl, c.egress, c.server)
			}
			natPort, dport := l4Ports(t, p, c.proto)
			if preserve != (natPort == podPort) {
				t.Errorf("NAT port %d, pod port %d, preservation %v", natPort, podPort, preserve)
			}
			if dport != srvPort {
				t.Errorf("destination port %d, want %d", dport, srvPort)
			}
			var fl conntrack.Flow
			k := conntrack.Tuple{Src: conntrack.Addr(addr16(c.pod)), Dst: conntrack.Addr(addr16(c.server)), SrcPort: podPort, DstPort: srvPort, Proto: protoNum(c)}
			if !f.ct.Track(conntrack.Original, &k, 0, testNow, &fl) || fl.NATPort != natPort || fl.NATAddr != conntrack.Addr(addr16(c.egress)) {
				t.Fatalf("flow %+v does not match output port %d", fl, natPort)
			}
			if !bytes.HasSuffix(out, payload) {
				t.Error("payload changed")
			}
			fwdIP := out[14:]
			checkIPChecksums(t, "forward", fwdIP)

			// Reply from the server to the egress IP.
			rep := pkt{src: c.server, dst: c.egress, ttl: 50, proto: c.proto, sport: srvPort, dport: natPort, flags: "SA", payload: payload}
			if c.proto == "echo" {
				rep.proto, rep.sport, rep.dport = "echoreply", natPort, 0
			}
			r, out = f.run(t, plainFrame(t, rep.build(t)))
			mustTx(t, r, underlayHop.Ifindex)
			inner := checkEncap(t, out, c.node, c.nodeMAC, c.kind, testVNI)
			ip := gopacket.NewPacket(inner, ipLayerType(inner), gopacket.Default)
			src, dst, ttl = ipOf(netLayers(ip)[0])
			if src != c.server || dst != c.pod || ttl != 49 {
				t.Errorf("reply inner %v→%v ttl %d, want %v→%v ttl 49", src, dst, ttl, c.server, c.pod)
			}
			sp, dp := l4Ports(t, ip, c.proto)
			if c.proto == "echo" {
				if sp != podPort {
					t.Errorf("echo reply id %d, want %d", sp, podPort)
				}
			} else if sp != srvPort || dp != podPort {
				t.Errorf("reply ports %d→%d, want %d→%d", sp, dp, srvPort, podPort)
			}
			checkIPChecksums(t, "reply inner", inner)

			// An ICMP error about the forwarded packet: frag needed / too big.
			e := pkt{src: c.errorSrc, dst: c.egress, ttl: 60, proto: "icmperr", quote: fwdIP, mtu: 1400}
			if c.egress.Is4() {
				e.icmpType, e.icmpCode = 3, 4
			} else {
				e.icmpType = 2
			}
			r, out = f.run(t, plainFrame(t, e.build(t)))
			mustTx(t, r, underlayHop.Ifindex)
			inner = checkEncap(t, out, c.node, c.nodeMAC, c.kind, testVNI)
			checkIPChecksums(t, "icmp error", inner)
			ip = gopacket.NewPacket(inner, ipLayerType(inner), gopacket.Default)
			src, dst, _ = ipOf(netLayers(ip)[0])
			if src != c.errorSrc || dst != c.pod {
				t.Errorf("icmp error %v→%v, want %v→%v", src, dst, c.errorSrc, c.pod)
			}
			var quoted []byte
			if v4 := c.egress.Is4(); v4 {
				ic := ip.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
				if ic.TypeCode != layers.CreateICMPv4TypeCode(3, 4) || ic.Seq != 1400 {
					t.Errorf("icmp %v mtu %d", ic.TypeCode, ic.Seq)
				}
				quoted = ic.Payload
			} else {
				ic := ip.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
				if ic.TypeCode != layers.CreateICMPv6TypeCode(2, 0) || binary.BigEndian.Uint32(ic.Payload[:4]) != 1400 {
					t.Errorf("icmpv6 %v", ic.TypeCode)
				}
				quoted = ic.Payload[4:]
			}
			q := gopacket.NewPacket(quoted, ipLayerType(quoted), gopacket.Default)
			src, dst, _ = ipOf(netLayers(q)[0])
			if src != c.pod || dst != c.server {
				t.Errorf("quoted %v→%v, want %v→%v", src, dst, c.pod, c.server)
			}
			if sp, _ := l4Ports(t, q, c.proto); sp != podPort {
				t.Errorf("quoted source port/id %d, want %d", sp, podPort)
			}
			// The quote is the pod's own packet again, but for the TTL the
			// gateway used up: RFC 5508 §4.2 (the pod must recognise it).
			want := append([]byte(nil), orig...)
			if c.pod.Is4() {
				want[8]--
				binary.BigEndian.PutUint16(want[10:], 0)
				binary.BigEndian.PutUint16(want[10:], ^refSum(want[:20]))
			} else {
				want[7]--
			}
			if !bytes.Equal(quoted, want) {
				t.Errorf("quoted packet differs from the pod's:\n got %x\nwant %x", quoted, want)
			}
			st := f.p.Stats()
			if st.Count(CounterForwarded) != 1 || st.Count(CounterReplied) != 2 || st.Count(CounterICMPXlated) != 1 || st.Count(CounterFlowsNew) != 1 {
				t.Errorf("counters %+v", st.Counters)
			}
		}
	}
}

func ipLayerType(b []byte) gopacket.LayerType {
	if b[0]>>4 == 4 {
		return layers.LayerTypeIPv4
	}
	return layers.LayerTypeIPv6
}

func protoNum(c flowCase) uint8 {
	switch c.proto {
	case "tcp":
		return header.ProtoTCP
	case "udp":
		return header.ProtoUDP
	}
	if c.pod.Is4() {
		return header.ProtoICMPv4
	}
	return header.ProtoICMPv6
}
