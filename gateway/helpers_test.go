package gateway

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/nat"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Test topology. Node 1 tunnels over IPv4, node 2 over IPv6.
var (
	gwVTEP4   = netip.MustParseAddr("10.0.0.1")
	gwVTEP6   = netip.MustParseAddr("fd00::1")
	node1VTEP = netip.MustParseAddr("10.0.0.2")
	node2VTEP = netip.MustParseAddr("fd00::2")
	router4   = netip.MustParseAddr("169.254.100.1")
	router6   = netip.MustParseAddr("fd99::1")

	pod1v4     = netip.MustParseAddr("10.244.1.5")
	pod1v6     = netip.MustParseAddr("fd10:1::5")
	pod1Unsel  = netip.MustParseAddr("10.244.1.6") // on node 1, no policy
	pod1Nov6IP = netip.MustParseAddr("fd10:1::7")  // on node 1, policy with IPv4 egress only
	pod2v4     = netip.MustParseAddr("10.244.2.7")
	pod2v6     = netip.MustParseAddr("fd10:2::7")

	egress4 = netip.MustParseAddr("192.0.2.10")
	egress6 = netip.MustParseAddr("2001:db8::10")
	server4 = netip.MustParseAddr("198.51.100.20")
	server6 = netip.MustParseAddr("2001:db8:ffff::20")

	gwInnerMAC  = [6]byte{0x02, 0, 0, 0, 0xee, 1}
	node1MAC    = [6]byte{0x02, 0, 0, 0, 0x01, 1}
	node2MAC    = [6]byte{0x02, 0, 0, 0, 0x02, 1}
	outHop      = route.Hop{Ifindex: 7, SrcMAC: [6]byte{0x02, 0xaa, 0, 0, 0, 1}, DstMAC: [6]byte{0x02, 0xbb, 0, 0, 0, 1}, MTU: 1500}
	underlayHop = route.Hop{Ifindex: 8, SrcMAC: [6]byte{0x02, 0xaa, 0, 0, 0, 2}, DstMAC: [6]byte{0x02, 0xcc, 0, 0, 0, 2}, MTU: 9000}
)

func testRoutes() *route.Cache {
	return route.NewStatic(
		route.Static{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Hop: outHop},
		route.Static{Prefix: netip.MustParsePrefix("::/0"), Hop: outHop},
		route.Static{Prefix: netip.MustParsePrefix("10.0.0.0/24"), Hop: underlayHop},
		route.Static{Prefix: netip.MustParsePrefix("fd00::/64"), Hop: underlayHop},
	)
}

// testTunnels are the encapsulations the tests' frames use.
var testTunnels = []TunnelVNI{{TunnelVXLAN, testVNI}, {TunnelGeneve, testVNI}, {TunnelGeneve, 7},
	{TunnelVXLAN, 42}, {TunnelGeneve, 42}, {TunnelGeneve, 9}}

func testConfig() Config {
	return Config{
		VTEPs:    []netip.Addr{gwVTEP4, gwVTEP6},
		InnerMAC: gwInnerMAC,
		RouterV4: router4,
		RouterV6: router6,
		Tunnels:  testTunnels,
		Nodes: []Node{
			{Name: "node1", VTEP: node1VTEP, InnerMAC: node1MAC, Pods: []Pod{
				{Addr: pod1v4, Policy: "web"}, {Addr: pod1v6, Policy: "web"},
				{Addr: pod1Unsel}, {Addr: pod1Nov6IP, Policy: "v4only"},
			}},
			{Name: "node2", VTEP: node2VTEP, InnerMAC: node2MAC, Pods: []Pod{
				{Addr: pod2v4, Policy: "web"}, {Addr: pod2v6, Policy: "web"},
			}},
		},
		Policies: []Policy{
			{Name: "web", EgressIPs: []netip.Addr{egress4, egress6}},
			{Name: "v4only", EgressIPs: []netip.Addr{netip.MustParseAddr("192.0.2.11")}},
		},
		Routes: testRoutes(),
	}
}

type fixture struct {
	p  *Pipeline
	w  *Processor
	ct *conntrack.Table
	// single sends frames down the one-frame path (processSingly) instead
	// of Process.
	single bool
}

// process hands a batch to f's processor, batched or one by one.
func (f *fixture) process(now int64, in, out [][]byte, res []Result) {
	if f.single {
		processSingly(f.w, now, in, out, res)
		return
	}
	f.w.Process(now, in, out, res)
}

func newFixture(t testing.TB, maxFlows int, cfg Config) *fixture {
	t.Helper()
	return newFixtureNAT(t, maxFlows, cfg, nat.DefaultConfig())
}

func newFixtureNAT(t testing.TB, maxFlows int, cfg Config, nc nat.Config) *fixture {
	t.Helper()
	return newFixtureCT(t, conntrack.Config{MaxFlows: maxFlows}, cfg, nc)
}

func newFixtureCT(t testing.TB, ctCfg conntrack.Config, cfg Config, nc nat.Config) *fixture {
	t.Helper()
	ct, err := conntrack.New(ctCfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPipeline(ct, nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSnapshot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Swap(s); err != nil {
		t.Fatal(err)
	}
	return &fixture{p: p, w: p.NewProcessor(1), ct: ct}
}

const testNow = int64(1_000_000_000_000)

// pkt describes an inner packet for gopacket to build.
type pkt struct {
	src, dst     netip.Addr
	ttl          uint8
	proto        string // tcp, udp, echo, echoreply, icmperr
	sport, dport uint16 // ports; sport is the echo identifier
	flags        string // TCP: any of S, A, R, F ("" is none)
	seq, ack     uint32 // TCP: seq 0 is taken as 1000
	payload      []byte
	icmpType     uint8 // icmperr: type/code and the quoted packet
	icmpCode     uint8
	mtu          uint16
	quote        []byte
	df           bool
}

func ipLayers(p pkt, proto layers.IPProtocol) (gopacket.SerializableLayer, gopacket.NetworkLayer) {
	if p.src.Is4() {
		var fl layers.IPv4Flag
		if p.df {
			fl = layers.IPv4DontFragment
		}
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: p.ttl, Protocol: proto, Flags: fl, Id: 0x1234,
			SrcIP: p.src.AsSlice(), DstIP: p.dst.AsSlice()}
		return ip, ip
	}
	ip := &layers.IPv6{Version: 6, HopLimit: p.ttl, NextHeader: proto, SrcIP: p.src.AsSlice(), DstIP: p.dst.AsSlice()}
	return ip, ip
}

func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// build returns the IP packet p describes.
func (p pkt) build(t testing.TB) []byte {
	t.Helper()
	if p.ttl == 0 {
		p.ttl = 64
	}
	v4 := p.src.Is4()
	pl := gopacket.Payload(p.payload)
	switch p.proto {
	case "tcp":
		ipl, nl := ipLayers(p, layers.IPProtocolTCP)
		seq := p.seq
		if seq == 0 {
			seq = 1000
		}
		tcp := &layers.TCP{SrcPort: layers.TCPPort(p.sport), DstPort: layers.TCPPort(p.dport), Seq: seq, Ack: p.ack, Window: 65535,
			SYN: strings.Contains(p.flags, "S"), ACK: strings.Contains(p.flags, "A"),
			RST: strings.Contains(p.flags, "R"), FIN: strings.Contains(p.flags, "F")}
		if err := tcp.SetNetworkLayerForChecksum(nl); err != nil {
			t.Fatal(err)
		}
		return serialize(t, ipl, tcp, pl)
	case "udp":
		ipl, nl := ipLayers(p, layers.IPProtocolUDP)
		udp := &layers.UDP{SrcPort: layers.UDPPort(p.sport), DstPort: layers.UDPPort(p.dport)}
		if err := udp.SetNetworkLayerForChecksum(nl); err != nil {
			t.Fatal(err)
		}
		return serialize(t, ipl, udp, pl)
	case "echo", "echoreply", "icmperr":
		if v4 {
			ipl, _ := ipLayers(p, layers.IPProtocolICMPv4)
			ic := &layers.ICMPv4{Id: p.sport, Seq: 7}
			switch p.proto {
			case "echo":
				ic.TypeCode = layers.CreateICMPv4TypeCode(8, 0)
			case "echoreply":
				ic.TypeCode = layers.CreateICMPv4TypeCode(0, 0)
			default:
				ic.TypeCode = layers.CreateICMPv4TypeCode(p.icmpType, p.icmpCode)
				ic.Id, ic.Seq = 0, p.mtu
				pl = gopacket.Payload(p.quote)
			}
			return serialize(t, ipl, ic, pl)
		}
		ipl, nl := ipLayers(p, layers.IPProtocolICMPv6)
		ic := &layers.ICMPv6{}
		if err := ic.SetNetworkLayerForChecksum(nl); err != nil {
			t.Fatal(err)
		}
		switch p.proto {
		case "echo", "echoreply":
			ic.TypeCode = layers.CreateICMPv6TypeCode(128, 0)
			if p.proto == "echoreply" {
				ic.TypeCode = layers.CreateICMPv6TypeCode(129, 0)
			}
			return serialize(t, ipl, ic, &layers.ICMPv6Echo{Identifier: p.sport, SeqNumber: 7}, pl)
		default:
			ic.TypeCode = layers.CreateICMPv6TypeCode(p.icmpType, p.icmpCode)
			var hdr [4]byte
			binary.BigEndian.PutUint32(hdr[:], uint32(p.mtu))
			return serialize(t, ipl, ic, gopacket.Payload(append(hdr[:], p.quote...)))
		}
	}
	t.Fatalf("unknown proto %q", p.proto)
	return nil
}

func ethType(ip []byte) layers.EthernetType {
	if ip[0]>>4 == 4 {
		return layers.EthernetTypeIPv4
	}
	return layers.EthernetTypeIPv6
}

// plainFrame wraps an IP packet in Ethernet, as it arrives from outside.
func plainFrame(t testing.TB, ip []byte) []byte {
	return serialize(t, &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0xbb, 0, 0, 0, 1}, DstMAC: net.HardwareAddr(outHop.SrcMAC[:]), EthernetType: ethType(ip)}, gopacket.Payload(ip))
}

// tun describes the encapsulation of a tunnel frame.
type tun struct {
	outerSrc, outerDst netip.Addr
	kind               Tunnel
	vni                uint32
	geneveOpts         []byte // whole options, a multiple of 4 bytes
	geneveCritical     bool
	vlan               uint16
}

// tunnelFrame encapsulates an inner IP packet as a worker node would.
func tunnelFrame(t testing.TB, tu tun, inner []byte) []byte {
	t.Helper()
	var ls []gopacket.SerializableLayer
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0xcc, 0, 0, 0, 2}, DstMAC: net.HardwareAddr(underlayHop.SrcMAC[:])}
	ipl, nl := ipLayers(pkt{src: tu.outerSrc, dst: tu.outerDst, ttl: 64}, layers.IPProtocolUDP)
	et := layers.EthernetTypeIPv4
	if tu.outerSrc.Is6() {
		et = layers.EthernetTypeIPv6
	}
	if tu.vlan != 0 {
		eth.EthernetType = layers.EthernetTypeDot1Q
		ls = append(ls, eth, &layers.Dot1Q{VLANIdentifier: tu.vlan, Type: et})
	} else {
		eth.EthernetType = et
		ls = append(ls, eth)
	}
	dport := layers.UDPPort(header.VXLANPort)
	if tu.kind == TunnelGeneve {
		dport = header.GenevePort
	}
	udp := &layers.UDP{SrcPort: 51000, DstPort: dport}
	if err := udp.SetNetworkLayerForChecksum(nl); err != nil {
		t.Fatal(err)
	}
	ls = append(ls, ipl, udp)
	if tu.kind == TunnelGeneve {
		h := make([]byte, 8, 8+len(tu.geneveOpts))
		h[0] = byte(len(tu.geneveOpts) / 4)
		if tu.geneveCritical {
			h[1] = 0x40
		}
		binary.BigEndian.PutUint16(h[2:], header.EtherTypeTEB)
		binary.BigEndian.PutUint32(h[4:], tu.vni<<8)
		ls = append(ls, gopacket.Payload(append(h, tu.geneveOpts...)))
	} else {
		ls = append(ls, &layers.VXLAN{ValidIDFlag: true, VNI: tu.vni})
	}
	innerEth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 9, 9}, DstMAC: net.HardwareAddr(gwInnerMAC[:]), EthernetType: ethType(inner)}
	ls = append(ls, innerEth, gopacket.Payload(inner))
	return serialize(t, ls...)
}

// geneveOpts returns two Geneve options (a 4-byte and an 8-byte one), not critical.
func geneveOpts() []byte {
	return []byte{
		0x01, 0x02, 0x03, 0x01, 0xde, 0xad, 0xbe, 0xef, // class 0x0102 type 3 len 1
		0xff, 0xff, 0x10, 0x02, 1, 2, 3, 4, 5, 6, 7, 8, // class 0xffff type 0x10 len 2
	}
}

// refSum is a slow RFC 1071 sum, independent of gateway/header's.
func refSum(bs ...[]byte) uint16 {
	var s uint32
	for _, b := range bs {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			s += uint32(b[len(b)-1]) << 8
		}
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

func pseudo(src, dst []byte, proto uint8, n int) []byte {
	b := append(append([]byte{}, src...), dst...)
	if len(src) == 4 {
		return append(b, 0, proto, byte(n>>8), byte(n))
	}
	return append(b, 0, 0, byte(n>>8), byte(n), 0, 0, 0, proto)
}

// checkIPChecksums verifies the IPv4 header checksum and the transport
// checksum of a complete IP packet (not truncated), and recursively of the
// packet quoted by an ICMP error when the quote is complete.
func checkIPChecksums(t *testing.T, what string, ip []byte) {
	t.Helper()
	var src, dst []byte
	var proto uint8
	var l4 []byte
	if ip[0]>>4 == 4 {
		hl := int(ip[0]&0xf) * 4
		if refSum(ip[:hl]) != 0xffff {
			t.Errorf("%s: bad IPv4 header checksum %#04x", what, binary.BigEndian.Uint16(ip[10:]))
		}
		src, dst, proto = ip[12:16], ip[16:20], ip[9]
		tl := int(binary.BigEndian.Uint16(ip[2:]))
		if tl > len(ip) {
			return // truncated quote
		}
		l4 = ip[hl:tl]
	} else {
		src, dst, proto = ip[8:24], ip[24:40], ip[6]
		pl := int(binary.BigEndian.Uint16(ip[4:]))
		if 40+pl > len(ip) {
			return
		}
		l4 = ip[40 : 40+pl]
	}
	switch proto {
	case header.ProtoTCP, header.ProtoUDP:
		if proto == header.ProtoUDP && len(src) == 4 && binary.BigEndian.Uint16(l4[6:]) == 0 {
			return
		}
		if refSum(pseudo(src, dst, proto, len(l4)), l4) != 0xffff {
			t.Errorf("%s: bad L4 (proto %d) checksum", what, proto)
		}
	case header.ProtoICMPv4:
		if refSum(l4) != 0xffff {
			t.Errorf("%s: bad ICMPv4 checksum", what)
		}
		if l4[0] == 3 || l4[0] == 11 {
			checkIPChecksums(t, what+" (quoted)", l4[8:])
		}
	case header.ProtoICMPv6:
		if refSum(pseudo(src, dst, proto, len(l4)), l4) != 0xffff {
			t.Errorf("%s: bad ICMPv6 checksum", what)
		}
		if l4[0] < 128 {
			checkIPChecksums(t, what+" (quoted)", l4[8:])
		}
	}
}

func addr16(a netip.Addr) [16]byte { return a.As16() }
