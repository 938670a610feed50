package gateway

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/egret-gw/egret/gateway/header"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

func TestDecodeTunnel(t *testing.T) {
	inner := pkt{src: pod2v6, dst: server6, ttl: 9, proto: "tcp", sport: 1234, dport: 443, flags: "S"}.build(t)
	tu := tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelGeneve, vni: 0xabcdef, geneveOpts: geneveOpts(), vlan: 300}
	fr := tunnelFrame(t, tu, inner)
	var p Parsed
	p.Decode(fr)
	if p.Kind != KindTunnel || p.Tunnel != TunnelGeneve || p.VNI != 0xabcdef || !p.HasVLAN || p.VLAN&0xfff != 300 {
		t.Fatalf("parsed %+v", p)
	}
	if p.OuterVer != 6 || p.OuterSrc != addr16(node2VTEP) || p.OuterDst != addr16(gwVTEP6) || p.OuterSrcPort != 51000 {
		t.Errorf("outer %+v", p)
	}
	if p.IPVer != 6 || p.Src != addr16(pod2v6) || p.Dst != addr16(server6) || p.TTL != 9 || p.Proto != header.ProtoTCP ||
		!p.HasL4 || p.SrcPort != 1234 || p.DstPort != 443 || p.TCPFlags != conntrack_SYN {
		t.Errorf("inner %+v", p)
	}
	if p.End != len(fr) || p.L4-p.L3 != header.IPv6Len || p.InnerEth+header.EthernetLen != p.L3 {
		t.Errorf("offsets L3 %d L4 %d End %d eth %d (frame %d)", p.L3, p.L4, p.End, p.InnerEth, len(fr))
	}
}

const conntrack_SYN = 0x02

func TestDecodeVariants(t *testing.T) {
	// QinQ (802.1ad + 802.1Q) around a plain IPv4 UDP packet.
	ip := udpFrom(server4, egress4).build(t)
	qinq := serialize(t,
		&layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeQinQ},
		&layers.Dot1Q{VLANIdentifier: 10, Type: layers.EthernetTypeDot1Q},
		&layers.Dot1Q{VLANIdentifier: 20, Type: layers.EthernetTypeIPv4},
		gopacket.Payload(ip))
	var p Parsed
	p.Decode(qinq)
	if p.Kind != KindIP || p.VLAN&0xfff != 20 || p.SrcPort != 5000 || p.DstPort != 53 || p.Dst != addr16(egress4) {
		t.Errorf("qinq: %+v", p)
	}

	// IPv6 with hop-by-hop and destination options before UDP.
	ext := []byte{
		header.ProtoDestOpts, 0, 1, 4, 0, 0, 0, 0, // hop-by-hop: PadN
		header.ProtoUDP, 0, 1, 4, 0, 0, 0, 0, // destination options: PadN
		0x13, 0x88, 0, 53, 0, 9, 0, 0, 'x',
	}
	p.Decode(plainFrame(t, rawIP(t, server6, egress6, layers.IPProtocolIPv6HopByHop, ext)))
	if p.Kind != KindIP || p.Proto != header.ProtoUDP || p.L4 != header.EthernetLen+header.IPv6Len+16 || p.SrcPort != 5000 || !p.HasL4 {
		t.Errorf("ipv6 ext headers: %+v", p)
	}

	// ICMPv4 error quoting a UDP packet.
	quoted := udpFrom(egress4, server4).build(t)
	e := pkt{src: netip.MustParseAddr("203.0.113.1"), dst: egress4, proto: "icmperr", icmpType: 11, quote: quoted[:28]}
	p.Decode(plainFrame(t, e.build(t)))
	if !p.ICMPErr || p.EmbProto != header.ProtoUDP || p.EmbSrc != addr16(egress4) || p.EmbDst != addr16(server4) || p.EmbSrcPort != 5000 || p.EmbDstPort != 53 {
		t.Errorf("icmp error: %+v", p)
	}
	// The same with the quote cut inside the UDP header: not translatable.
	e.quote = quoted[:24]
	p.Decode(plainFrame(t, e.build(t)))
	if p.Kind != KindIP || p.ICMPErr {
		t.Errorf("short quote: kind %v err %v", p.Kind, p.ICMPErr)
	}

	// A later IPv4 fragment has no ports.
	fr := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, Id: 5, FragOffset: 3, SrcIP: server4.AsSlice(), DstIP: egress4.AsSlice()}
	p.Decode(plainFrame(t, serialize(t, fr, gopacket.Payload(make([]byte, 16)))))
	if !p.Frag || p.HasL4 || p.FragOff != 3 || p.FragID != 5 {
		t.Errorf("fragment: %+v", p)
	}
}

// TestDecodeTruncations decodes every prefix of valid frames: each must be
// malformed (or not IP) and nothing may panic.
func TestDecodeTruncations(t *testing.T) {
	for _, fr := range seedFrames(t) {
		var p Parsed
		p.Decode(fr)
		if p.Kind != KindTunnel && p.Kind != KindIP {
			t.Fatalf("seed frame does not decode: %+v", p)
		}
		for n := 0; n < len(fr); n++ {
			p.Decode(fr[:n])
			if p.Kind == KindMalformed && p.Bad == DropNone {
				t.Fatalf("prefix %d: malformed without a reason", n)
			}
			if p.Kind >= KindIP && (p.End > n || p.L4 > p.End) {
				t.Fatalf("prefix %d of %d: offsets beyond the frame: %+v", n, len(fr), p)
			}
		}
	}
}

// seedFrames are valid frames of every shape, for tests and fuzz seeds.
func seedFrames(t testing.TB) [][]byte {
	var fs [][]byte
	gen := tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelGeneve, vni: 7, geneveOpts: geneveOpts()}
	for _, tu := range []tun{podTun(), gen} {
		for _, p := range []pkt{
			{src: pod1v4, dst: server4, proto: "tcp", sport: 1, dport: 2, flags: "S"},
			{src: pod1v6, dst: server6, proto: "udp", sport: 1, dport: 2},
			{src: pod2v4, dst: server4, proto: "echo", sport: 3},
			{src: pod2v6, dst: server6, proto: "echo", sport: 3},
		} {
			fs = append(fs, tunnelFrame(t, tu, p.build(t)))
		}
	}
	q4 := pkt{src: egress4, dst: server4, proto: "udp", sport: 5000, dport: 53}.build(t)
	q6 := pkt{src: egress6, dst: server6, proto: "tcp", sport: 5000, dport: 53, flags: "S"}.build(t)
	fs = append(fs,
		plainFrame(t, pkt{src: server4, dst: egress4, proto: "udp", sport: 53, dport: 5000}.build(t)),
		plainFrame(t, pkt{src: server6, dst: egress6, proto: "echoreply", sport: 3}.build(t)),
		plainFrame(t, pkt{src: server4, dst: egress4, proto: "icmperr", icmpType: 3, icmpCode: 4, mtu: 1400, quote: q4}.build(t)),
		plainFrame(t, pkt{src: server6, dst: egress6, proto: "icmperr", icmpType: 2, mtu: 1400, quote: q6}.build(t)),
		// Options that route nowhere (record route, a Routing header with
		// no segments left): one byte away from a source route.
		tunnelFrame(t, podTun(), withIPv4Options(optUDP(pod1v4, server4).build(t), []byte{1, 7, 7, 4, 0, 0, 0, 0})),
		tunnelFrame(t, podTun(), withRoutingHeader(optUDP(pod1v6, server6).build(t), 0, 0)),
		plainFrame(t, withIPv4Options(optUDP(server4, egress4).build(t), []byte{1, 7, 7, 4, 0, 0, 0, 0})),
	)
	return fs
}

// optUDP is a UDP packet on ports gopacket decodes no further (not DNS).
func optUDP(src, dst netip.Addr) pkt {
	return pkt{src: src, dst: dst, proto: "udp", sport: 7000, dport: 7001, payload: []byte("q")}
}

// sourceRoutedFrames are frames Decode drops as source_route: a pod's and
// an outside packet with LSRR and SSRR, and with IPv6 Routing headers that
// have segments left.
func sourceRoutedFrames(t testing.TB) [][]byte {
	return [][]byte{
		tunnelFrame(t, podTun(), withIPv4Options(optUDP(pod1v4, server4).build(t), srrOption(0x83))),
		tunnelFrame(t, podTun(), withIPv4Options(pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 1, dport: 2, flags: "S"}.build(t), srrOption(0x89))),
		tunnelFrame(t, podTun(), withRoutingHeader(optUDP(pod1v6, server6).build(t), 0, 1)),
		tunnelFrame(t, podTun(), withRoutingHeader(optUDP(pod1v6, server6).build(t), 4, 2)),
		plainFrame(t, withIPv4Options(optUDP(server4, egress4).build(t), srrOption(0x83))),
		plainFrame(t, withRoutingHeader(optUDP(server6, egress6).build(t), 0, 1)),
	}
}

func TestDecodeAllocs(t *testing.T) {
	fs := seedFrames(t)
	var p Parsed
	if n := testing.AllocsPerRun(100, func() {
		for _, f := range fs {
			p.Decode(f)
		}
	}); n != 0 {
		t.Errorf("Decode allocates %v times per run", n)
	}
}

func FuzzParse(f *testing.F) {
	for _, fr := range seedFrames(f) {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Parsed
		p.Decode(b)
		switch p.Kind {
		case KindMalformed:
			if p.Bad == DropNone {
				t.Fatal("malformed without a reason")
			}
		case KindIP, KindTunnel:
			if p.L3 > p.L4 || p.L4 > p.End || p.End > len(b) || (p.IPVer != 4 && p.IPVer != 6) {
				t.Fatalf("inconsistent offsets: %+v", p)
			}
			if p.ICMPErr && (p.EmbL3 < p.L4 || p.EmbL4+8 > p.End) {
				t.Fatalf("embedded offsets: %+v", p)
			}
			if p.Kind == KindTunnel && (p.InnerEth+header.EthernetLen != p.L3 || (p.Tunnel != TunnelVXLAN && p.Tunnel != TunnelGeneve)) {
				t.Fatalf("tunnel: %+v", p)
			}
			if p.IPVer == 4 && binary.BigEndian.Uint16(b[p.L3+2:]) != uint16(p.End-p.L3) {
				t.Fatalf("IPv4 end %d does not match its total length", p.End)
			}
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	fr := tunnelFrame(b, podTun(), pkt{src: pod1v4, dst: server4, proto: "tcp", sport: 1, dport: 2, flags: "A", payload: make([]byte, 64)}.build(b))
	var p Parsed
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		p.Decode(fr)
	}
	if p.Kind != KindTunnel {
		b.Fatal(p.Kind)
	}
}
