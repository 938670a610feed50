package gateway

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// The parser against gopacket, an independent decoder: every field Decode
// says is valid must be what gopacket reads at the same place. gopacket is
// laxer (it decodes truncated and inconsistent headers that Decode calls
// malformed), so the comparison runs where Decode accepts a frame, and a
// seed frame must be accepted. Geneve's inner packet is not compared:
// gopacket's Geneve layer hands its payload to the Ethernet decoder only
// for protocol type 0x6558 and ignores the O and C flags and the VNI
// reserved byte that Decode checks, so it sees inner packets Decode
// rejects and vice versa; the outer packet of a Geneve frame is compared.

// TestDecodeMatchesGopacket runs the seed frames and 200k random mutations
// of them (byte changes aimed at the headers, truncations, VLAN tags)
// through Decode and gopacket, from a fixed seed.
func TestDecodeMatchesGopacket(t *testing.T) {
	var p Parsed
	seeds := seedFrames(t)
	for _, f := range seeds {
		for _, b := range [][]byte{f, withVLAN(f, false), withVLAN(f, true)} {
			p.Decode(b)
			if p.Kind < KindIP {
				t.Fatalf("seed frame not accepted (%v %v): % x", p.Kind, p.Bad, b)
			}
			if !checkGopacket(t, &p, b) {
				t.Fatalf("gopacket cannot decode seed frame % x", b)
			}
		}
	}
	routed := sourceRoutedFrames(t)
	for _, b := range routed {
		if p.Decode(b); p.Kind != KindMalformed || p.Bad != DropSourceRoute {
			t.Fatalf("source-routed frame not refused as such (%v %v): % x", p.Kind, p.Bad, b)
		}
		checkGopacketRouted(t, &p, b) // gopacket cannot decode SRv6 (routing type 4)
	}
	pool := append(append([][]byte(nil), seeds...), routed...)
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 0, 2048)
	compared, comparedRouted := 0, 0
	for i := 0; i < 200000; i++ {
		f := pool[rng.IntN(len(pool))]
		if rng.IntN(4) == 0 {
			f = withVLAN(f, rng.IntN(2) == 0)
		}
		b := append(buf[:0], f...)
		for n := 1 + rng.IntN(3); n > 0; n-- {
			// Mostly header bytes: where the decisions are.
			b[rng.IntN(min(len(b), 160))] = byte(rng.Uint32())
		}
		if rng.IntN(3) == 0 {
			b = b[:rng.IntN(len(b)+1)]
		}
		p.Decode(b) // into a Parsed left dirty by the previous frame, as a worker's is
		if p.Kind >= KindIP && checkGopacket(t, &p, b) {
			compared++
		}
		if p.Kind == KindMalformed && p.Bad == DropSourceRoute && checkGopacketRouted(t, &p, b) {
			comparedRouted++
		}
	}
	if compared < 50000 || comparedRouted < 5000 {
		t.Fatalf("only %d of 200000 frames compared, %d of them source routed", compared, comparedRouted)
	}
}

// gopacketSourceRoute reports whether an IP header gopacket decoded in ls
// source routes: an IPv4 LSRR or SSRR option, or an IPv6 Routing header
// with segments left before any AH (the extension walk stops at AH).
func gopacketSourceRoute(ls []gopacket.Layer) bool {
	for _, l := range ls {
		switch x := l.(type) {
		case *layers.IPv4:
			for _, o := range x.Options {
				if o.OptionType == 0x83 || o.OptionType == 0x89 {
					return true
				}
			}
		case *layers.IPv6Routing:
			if x.SegmentsLeft != 0 {
				return true
			}
		case *layers.IPSecAH:
			return false
		}
	}
	return false
}

// checkGopacketRouted checks that gopacket sees a source route in frame b,
// which Decode refused as source_route. It reports false, comparing
// nothing, when gopacket cannot decode b or b is Geneve (whose inner
// packet gopacket and Decode see differently, above).
func checkGopacketRouted(t *testing.T, p *Parsed, b []byte) bool {
	t.Helper()
	pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.DecodeOptions{NoCopy: true})
	if pkt.ErrorLayer() != nil || pkt.Layer(layers.LayerTypeGeneve) != nil {
		return false
	}
	if !gopacketSourceRoute(pkt.Layers()) {
		t.Fatalf("Decode says %v, gopacket sees no source route: % x", p.Bad, b)
	}
	return true
}

// withVLAN puts an 802.1Q tag (and an 802.1ad one before it if qinq) after
// the MAC addresses of f.
func withVLAN(f []byte, qinq bool) []byte {
	b := append([]byte(nil), f[:12]...)
	if qinq {
		b = append(b, 0x88, 0xa8, 0x00, 0x64)
	}
	b = append(b, 0x81, 0x00, 0x20, 0x07)
	return append(b, f[12:]...)
}

// checkGopacket compares p, an accepted frame b, with gopacket's decoding.
// It reports false, comparing nothing, when gopacket cannot decode the
// headers p describes.
func checkGopacket(t *testing.T, p *Parsed, b []byte) bool {
	t.Helper()
	pkt := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.DecodeOptions{NoCopy: true})
	if pkt.ErrorLayer() != nil {
		return false
	}
	ls := pkt.Layers()
	if gopacketSourceRoute(ls) {
		t.Fatalf("Decode accepted a frame gopacket sees source routed: % x", b)
	}
	var vlan *layers.Dot1Q
	i := 0
	for ; i < len(ls); i++ {
		if d, ok := ls[i].(*layers.Dot1Q); ok {
			vlan = d
			continue
		}
		if ls[i].LayerType() == layers.LayerTypeIPv4 || ls[i].LayerType() == layers.LayerTypeIPv6 {
			break
		}
	}
	if i == len(ls) {
		return false
	}
	if p.HasVLAN != (vlan != nil) || (vlan != nil && p.VLAN != uint16(vlan.Priority)<<13|uint16(b2u(vlan.DropEligible))<<12|vlan.VLANIdentifier) {
		t.Fatalf("VLAN %v %#x, gopacket %+v: % x", p.HasVLAN, p.VLAN, vlan, b)
	}
	if p.Kind == KindTunnel {
		if !checkIP(t, b, ls[i:], p.OuterVer, p.OuterSrc, p.OuterDst, 0, layers.IPProtocolUDP) {
			return false
		}
		u, ok := layerOf[*layers.UDP](ls[i:])
		if !ok || uint16(u.SrcPort) != p.OuterSrcPort {
			return false
		}
		if p.Tunnel == TunnelGeneve {
			return true // see the comment at the top
		}
		vx, ok := layerOf[*layers.VXLAN](ls[i:])
		if !ok {
			return false
		}
		if vx.VNI != p.VNI {
			t.Fatalf("VNI %d, gopacket %d: % x", p.VNI, vx.VNI, b)
		}
		// The inner packet: after the inner Ethernet layer.
		for i++; i < len(ls) && ls[i].LayerType() != layers.LayerTypeEthernet; i++ {
		}
		for ; i < len(ls) && ls[i].LayerType() != layers.LayerTypeIPv4 && ls[i].LayerType() != layers.LayerTypeIPv6; i++ {
		}
		if i == len(ls) {
			return false
		}
	}
	if !checkIP(t, b, ls[i:], p.IPVer, p.Src, p.Dst, p.TTL, layers.IPProtocol(p.Proto)) {
		return false
	}
	if p.Frag {
		if p.IPVer == 4 {
			ip := ls[i].(*layers.IPv4)
			if p.FragOff != ip.FragOffset || p.MoreFrags != (ip.Flags&layers.IPv4MoreFragments != 0) || p.FragID != uint32(ip.Id) {
				t.Fatalf("fragment %d %v %d, gopacket %+v: % x", p.FragOff, p.MoreFrags, p.FragID, ip, b)
			}
		} else {
			fh, ok := layerOf[*layers.IPv6Fragment](ls[i:])
			if !ok {
				return false
			}
			if p.FragOff != fh.FragmentOffset || p.MoreFrags != fh.MoreFragments || p.FragID != fh.Identification {
				t.Fatalf("fragment %d %v %d, gopacket %+v: % x", p.FragOff, p.MoreFrags, p.FragID, fh, b)
			}
		}
	}
	if !p.HasL4 {
		return true
	}
	switch p.Proto {
	case protoTCPNum:
		h, ok := layerOf[*layers.TCP](ls[i:])
		if !ok {
			return false
		}
		if p.SrcPort != uint16(h.SrcPort) || p.DstPort != uint16(h.DstPort) || p.TCPFlags != h.Contents[13] ||
			p.TCPSeq != h.Seq || p.TCPAck != h.Ack || int(p.TCPLen) != len(h.Payload) {
			t.Fatalf("TCP %d %d %#x, gopacket %d %d: % x", p.SrcPort, p.DstPort, p.TCPFlags, h.SrcPort, h.DstPort, b)
		}
	case protoUDPNum:
		h, ok := layerOf[*layers.UDP](ls[i:])
		if !ok {
			return false
		}
		if p.SrcPort != uint16(h.SrcPort) || p.DstPort != uint16(h.DstPort) {
			t.Fatalf("UDP %d %d, gopacket %d %d: % x", p.SrcPort, p.DstPort, h.SrcPort, h.DstPort, b)
		}
	case protoICMPv4Num:
		h, ok := layerOf[*layers.ICMPv4](ls[i:])
		if !ok {
			return false
		}
		if p.ICMPType != h.TypeCode.Type() || p.ICMPCode != h.TypeCode.Code() || (p.ICMPEcho && p.ICMPID != h.Id) {
			t.Fatalf("ICMPv4 %d/%d id %d, gopacket %v id %d: % x", p.ICMPType, p.ICMPCode, p.ICMPID, h.TypeCode, h.Id, b)
		}
		if p.ICMPErr {
			return checkEmbedded(t, p, b, h.Payload, layers.LayerTypeIPv4)
		}
	case protoICMPv6Num:
		h, ok := layerOf[*layers.ICMPv6](ls[i:])
		if !ok {
			return false
		}
		if p.ICMPType != h.TypeCode.Type() || p.ICMPCode != h.TypeCode.Code() {
			t.Fatalf("ICMPv6 %d/%d, gopacket %v: % x", p.ICMPType, p.ICMPCode, h.TypeCode, b)
		}
		if p.ICMPEcho {
			e, ok := layerOf[*layers.ICMPv6Echo](ls[i:])
			if !ok {
				return false
			}
			if p.ICMPID != e.Identifier {
				t.Fatalf("ICMPv6 echo id %d, gopacket %d: % x", p.ICMPID, e.Identifier, b)
			}
		}
		if p.ICMPErr {
			// gopacket keeps the 4 bytes after the checksum in the layer.
			return checkEmbedded(t, p, b, h.Payload[4:], layers.LayerTypeIPv6)
		}
	}
	return true
}

// Protocol numbers as untyped constants for the switch above.
const (
	protoICMPv4Num = 1
	protoTCPNum    = 6
	protoUDPNum    = 17
	protoICMPv6Num = 58
)

// checkIP compares the IP layer ls[0] and the transport protocol after its
// extension headers; ttl 0 skips the TTL.
func checkIP(t *testing.T, b []byte, ls []gopacket.Layer, ver uint8, src, dst [16]byte, ttl uint8, proto layers.IPProtocol) bool {
	t.Helper()
	var gs, gd netip.Addr
	var gttl uint8
	var gproto layers.IPProtocol
	switch ip := ls[0].(type) {
	case *layers.IPv4:
		if ver != 4 {
			t.Fatalf("IPv%d, gopacket IPv4: % x", ver, b)
		}
		gs, gd, gttl, gproto = addrOf(ip.SrcIP), addrOf(ip.DstIP), ip.TTL, ip.Protocol
	case *layers.IPv6:
		if ver != 6 {
			t.Fatalf("IPv%d, gopacket IPv6: % x", ver, b)
		}
		gs, gd, gttl, gproto = addrOf(ip.SrcIP), addrOf(ip.DstIP), ip.HopLimit, ip.NextHeader
		for _, l := range ls[1:] {
			switch e := l.(type) {
			case *layers.IPv6HopByHop:
				gproto = e.NextHeader
				continue
			case *layers.IPv6Routing:
				gproto = e.NextHeader
				continue
			case *layers.IPv6Destination:
				gproto = e.NextHeader
				continue
			case *layers.IPv6Fragment:
				gproto = e.NextHeader
				continue
			}
			break
		}
	}
	if ttl != 0 && ttl != gttl || netip.AddrFrom16(src) != netip.AddrFrom16(gs.As16()) || netip.AddrFrom16(dst) != netip.AddrFrom16(gd.As16()) {
		t.Fatalf("IP %v > %v ttl %d, gopacket %v > %v ttl %d: % x", netip.AddrFrom16(src), netip.AddrFrom16(dst), ttl, gs, gd, gttl, b)
	}
	if gproto != proto {
		// gopacket stops at a layer it cannot decode (a truncated
		// extension header); Decode called such a frame malformed.
		return false
	}
	return true
}

// checkEmbedded decodes the quote of an ICMP error with gopacket and
// compares the Emb fields.
func checkEmbedded(t *testing.T, p *Parsed, b, quote []byte, first gopacket.LayerType) bool {
	t.Helper()
	q := gopacket.NewPacket(quote, first, gopacket.DecodeOptions{NoCopy: true})
	ls := q.Layers()
	if len(ls) == 0 || q.ErrorLayer() != nil {
		return false
	}
	if !checkIP(t, b, ls, p.IPVer, p.EmbSrc, p.EmbDst, 0, layers.IPProtocol(p.EmbProto)) {
		return false
	}
	switch p.EmbProto {
	case protoTCPNum:
		h, ok := layerOf[*layers.TCP](ls)
		if !ok {
			// A quote cut inside the TCP header: gopacket wants 20 bytes.
			return false
		}
		if p.EmbSrcPort != uint16(h.SrcPort) || p.EmbDstPort != uint16(h.DstPort) {
			t.Fatalf("quoted TCP %d %d, gopacket %d %d: % x", p.EmbSrcPort, p.EmbDstPort, h.SrcPort, h.DstPort, b)
		}
	case protoUDPNum:
		h, ok := layerOf[*layers.UDP](ls)
		if !ok {
			return false
		}
		if p.EmbSrcPort != uint16(h.SrcPort) || p.EmbDstPort != uint16(h.DstPort) {
			t.Fatalf("quoted UDP %d %d, gopacket %d %d: % x", p.EmbSrcPort, p.EmbDstPort, h.SrcPort, h.DstPort, b)
		}
	}
	return true
}

func layerOf[L gopacket.Layer](ls []gopacket.Layer) (L, bool) {
	for _, l := range ls {
		if x, ok := l.(L); ok {
			return x, true
		}
	}
	var zero L
	return zero, false
}

func addrOf(ip []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func FuzzDecodeMatchesGopacket(f *testing.F) {
	for _, fr := range seedFrames(f) {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Parsed
		if p.Decode(b); p.Kind >= KindIP {
			checkGopacket(t, &p, b)
		}
	})
}
