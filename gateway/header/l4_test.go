package header

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// ipPair returns random IPv4 or IPv6 network layers for checksumming.
func ipPair(r *rand.Rand, v6 bool, proto layers.IPProtocol) gopacket.NetworkLayer {
	if v6 {
		return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: proto, SrcIP: net.IP(randBytes(r, 16)), DstIP: net.IP(randBytes(r, 16))}
	}
	return &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: net.IP(randBytes(r, 4)), DstIP: net.IP(randBytes(r, 4))}
}

// l4 returns the L4 bytes and pseudo-header sum of an IPv4 or IPv6 packet.
func l4(t *testing.T, pkt []byte, v6 bool, proto uint8) ([]byte, uint32) {
	t.Helper()
	if v6 {
		ip := IPv6(pkt)
		if !ipv6Valid(pkt) {
			t.Fatal("bad IPv6")
		}
		return pkt[IPv6Len : IPv6Len+int(ip.PayloadLength())], ip.PseudoHeaderChecksum(proto, ip.PayloadLength())
	}
	ip := IPv4(pkt)
	if !ipv4Valid(pkt) {
		t.Fatal("bad IPv4")
	}
	hl, tl := ip.HeaderLength(), ip.TotalLength()
	s, d := ip.SrcAddr(), ip.DstAddr()
	return pkt[hl:tl], PseudoHeaderChecksum(proto, s[:], d[:], tl-uint16(hl))
}

// udpSum is the UDP checksum of seg as sent: 0 is sent as 0xffff.
func udpSum(seg []byte, pseudo uint32) uint16 {
	return UDPChecksumValue(l4Checksum(seg, udpChecksum, pseudo))
}

func TestUDPAgainstGopacket(t *testing.T) {
	r := newRand()
	for i := 0; i < 400; i++ {
		v6 := i%2 == 1
		ip := ipPair(r, v6, layers.IPProtocolUDP)
		u := &layers.UDP{SrcPort: layers.UDPPort(r.Uint32()), DstPort: layers.UDPPort(r.Uint32())}
		u.SetNetworkLayerForChecksum(ip)
		data := serialize(t, ip.(gopacket.SerializableLayer), u, gopacket.Payload(randBytes(r, r.IntN(200))))
		seg, pseudo := l4(t, data, v6, ProtoUDP)
		g := &layers.UDP{}
		if err := g.DecodeFromBytes(seg, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		b := UDP(seg).Fixed()
		if b.SrcPort() != uint16(g.SrcPort) || b.DstPort() != uint16(g.DstPort) || b.Length() != g.Length ||
			b.Checksum() != g.Checksum || !bytes.Equal(seg[UDPLen:b.Length()], g.Payload) {
			t.Fatalf("field mismatch: %+v", g)
		}
		// gopacket does not apply RFC 768's 0 → 0xffff rule; we do.
		if c := udpSum(seg, pseudo); c != UDPChecksumValue(g.Checksum) {
			t.Fatalf("checksum %#x want %#x", c, g.Checksum)
		}

		// NAT-style rewrite with one summed delta (as gateway/nat does),
		// then a full check.
		sp, dp := uint16(r.Uint32()), uint16(r.Uint32())
		d := ChecksumDelta16(b.SrcPort(), sp) + ChecksumDelta16(b.DstPort(), dp)
		b.SetSrcPort(sp)
		b.SetDstPort(dp)
		var newPseudo uint32
		if v6 {
			ip6 := IPv6(data)
			old, nw := ip6.SrcAddr(), [16]byte(randBytes(r, 16))
			ip6.SetSrcAddr(nw)
			d += ChecksumDelta(old[:], nw[:])
			newPseudo = ip6.PseudoHeaderChecksum(ProtoUDP, ip6.PayloadLength())
		} else {
			ip4 := IPv4(data)
			old, nw := ip4.DstAddr(), [4]byte(randBytes(r, 4))
			ip4.SetDstAddr(nw)
			d += ChecksumDeltaIPv4(old, nw)
			s := ip4.SrcAddr()
			newPseudo = PseudoHeaderChecksum(ProtoUDP, s[:], nw[:], b.Length())
		}
		b.SetChecksum(UDPChecksumValue(ChecksumApplyDelta(b.Checksum(), d)))
		if got, want := b.Checksum(), udpSum(seg, newPseudo); !equivalent(got, want) || got == 0 {
			t.Fatalf("incremental UDP checksum %#x, recomputed %#x", got, want)
		}
		b.SetLength(b.Length())
		if err := g.DecodeFromBytes(seg, gopacket.NilDecodeFeedback); err != nil || uint16(g.SrcPort) != sp || uint16(g.DstPort) != dp {
			t.Fatalf("setters not seen by gopacket: %v %+v", err, g)
		}
	}
}

func TestTCPAgainstGopacket(t *testing.T) {
	r := newRand()
	for i := 0; i < 400; i++ {
		v6 := i%2 == 1
		ip := ipPair(r, v6, layers.IPProtocolTCP)
		tc := &layers.TCP{SrcPort: layers.TCPPort(r.Uint32()), DstPort: layers.TCPPort(r.Uint32()),
			Seq: r.Uint32(), Ack: r.Uint32(), Window: uint16(r.Uint32()), Urgent: uint16(r.Uint32()),
			FIN: r.IntN(2) == 0, SYN: r.IntN(2) == 0, RST: r.IntN(2) == 0, PSH: r.IntN(2) == 0,
			ACK: r.IntN(2) == 0, URG: r.IntN(2) == 0, ECE: r.IntN(2) == 0, CWR: r.IntN(2) == 0}
		if i%3 == 0 {
			tc.Options = []layers.TCPOption{{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{5, 0xb4}},
				{OptionType: layers.TCPOptionKindNop}, {OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}}}
		}
		tc.SetNetworkLayerForChecksum(ip)
		data := serialize(t, ip.(gopacket.SerializableLayer), tc, gopacket.Payload(randBytes(r, r.IntN(200))))
		seg, pseudo := l4(t, data, v6, ProtoTCP)
		g := &layers.TCP{}
		if err := g.DecodeFromBytes(seg, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		b := TCP(seg)
		flags := uint8(0)
		for k, f := range []bool{g.FIN, g.SYN, g.RST, g.PSH, g.ACK, g.URG, g.ECE, g.CWR} {
			if f {
				flags |= 1 << k
			}
		}
		if b.SrcPort() != uint16(g.SrcPort) || b.DstPort() != uint16(g.DstPort) ||
			b.DataOffset() != int(g.DataOffset)*4 || b.Flags() != flags || b.Checksum() != g.Checksum {
			t.Fatalf("field mismatch: %+v", g)
		}
		if c := l4Checksum(seg, tcpChecksum, pseudo); c != g.Checksum {
			t.Fatalf("checksum %#x want %#x", c, g.Checksum)
		}
		// Port rewrites with incremental checksum updates, then gopacket
		// reads back.
		sp, dp := uint16(r.Uint32()), uint16(r.Uint32())
		c := ChecksumUpdate16(b.Checksum(), b.SrcPort(), sp)
		c = ChecksumApplyDelta(c, ChecksumDelta16(b.DstPort(), dp))
		b.SetSrcPort(sp)
		b.SetDstPort(dp)
		b.SetChecksum(c)
		if want := l4Checksum(seg, tcpChecksum, pseudo); !equivalent(c, want) {
			t.Fatalf("incremental TCP checksum %#x, recomputed %#x", c, want)
		}
		if err := g.DecodeFromBytes(seg, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		if uint16(g.SrcPort) != sp || uint16(g.DstPort) != dp || g.Checksum != c {
			t.Fatalf("setters not seen by gopacket: %+v", g)
		}
	}
}

func TestICMPv4AgainstGopacket(t *testing.T) {
	r := newRand()
	for i := 0; i < 200; i++ {
		var tcode layers.ICMPv4TypeCode
		switch i % 4 {
		case 0:
			tcode = layers.CreateICMPv4TypeCode(ICMPv4EchoRequest, 0)
		case 1:
			tcode = layers.CreateICMPv4TypeCode(ICMPv4EchoReply, 0)
		case 2:
			tcode = layers.CreateICMPv4TypeCode(ICMPv4DstUnreachable, ICMPv4FragNeeded)
		case 3:
			tcode = layers.CreateICMPv4TypeCode(ICMPv4TimeExceeded, ICMPv4TTLExceeded)
		}
		ic := &layers.ICMPv4{TypeCode: tcode, Id: uint16(r.Uint32()), Seq: uint16(r.Uint32())}
		payload := randBytes(r, 28+r.IntN(50))
		data := serialize(t, ic, gopacket.Payload(payload))
		g := &layers.ICMPv4{}
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		b := ICMPv4(data)
		if b.Type() != g.TypeCode.Type() || b.Code() != g.TypeCode.Code() || b.Checksum() != g.Checksum ||
			b.Ident() != g.Id {
			t.Fatalf("field mismatch: %+v", g)
		}
		if c := b.CalculateChecksum(); c != g.Checksum {
			t.Fatalf("CalculateChecksum %#x want %#x", c, g.Checksum)
		}
		id := uint16(r.Uint32())
		b.SetChecksum(ChecksumUpdate16(b.Checksum(), b.Ident(), id))
		b.SetIdent(id)
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		if g.Id != id || g.Checksum != b.CalculateChecksum() {
			t.Fatalf("setters not seen by gopacket: %+v", g)
		}
	}
}

func TestICMPv6AgainstGopacket(t *testing.T) {
	r := newRand()
	for i := 0; i < 200; i++ {
		ip := ipPair(r, true, layers.IPProtocolICMPv6).(*layers.IPv6)
		var data []byte
		echo := i%2 == 0
		if echo {
			ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(ICMPv6EchoRequest, 0)}
			ic.SetNetworkLayerForChecksum(ip)
			data = serialize(t, ip, ic, &layers.ICMPv6Echo{Identifier: uint16(r.Uint32()), SeqNumber: uint16(r.Uint32())},
				gopacket.Payload(randBytes(r, r.IntN(40))))
		} else {
			ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(ICMPv6PacketTooBig, 0)}
			ic.SetNetworkLayerForChecksum(ip)
			mtu := make([]byte, 4)
			binary.BigEndian.PutUint32(mtu, uint32(1280+r.IntN(8000)))
			data = serialize(t, ip, ic, gopacket.Payload(append(mtu, randBytes(r, 48)...)))
		}
		p := gopacket.NewPacket(data, layers.LayerTypeIPv6, noCopy)
		g := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
		seg, pseudo := l4(t, data, true, ProtoICMPv6)
		b := ICMPv6(seg)
		if b.Type() != g.TypeCode.Type() || b.Code() != g.TypeCode.Code() || b.Checksum() != g.Checksum {
			t.Fatalf("field mismatch: %+v", g)
		}
		if c := b.CalculateChecksum(pseudo); c != g.Checksum {
			t.Fatalf("CalculateChecksum %#x want %#x", c, g.Checksum)
		}
		if echo {
			ge := p.Layer(layers.LayerTypeICMPv6Echo).(*layers.ICMPv6Echo)
			// gopacket's echo layer drops the data; it is what follows
			// the 4 bytes after the ICMPv6 type/code/checksum.
			echoData := g.Payload[4:]
			if b.Ident() != ge.Identifier || !bytes.Equal(seg[ICMPv6MinLen:], echoData) {
				t.Fatalf("echo mismatch: %+v", ge)
			}
		}
		// Rewrite the destination address: ICMPv6 covers the pseudo-header.
		ip6 := IPv6(data)
		old, nw := ip6.DstAddr(), [16]byte(randBytes(r, 16))
		ip6.SetDstAddr(nw)
		b.SetChecksum(ChecksumUpdateAddr(b.Checksum(), old[:], nw[:]))
		if want := b.CalculateChecksum(ip6.PseudoHeaderChecksum(ProtoICMPv6, ip6.PayloadLength())); !equivalent(b.Checksum(), want) {
			t.Fatalf("incremental ICMPv6 checksum %#x, recomputed %#x", b.Checksum(), want)
		}
		b.Encode(&ICMPFields{Type: ICMPv6EchoReply})
		b.SetIdent(77)
		binary.BigEndian.PutUint16(b[6:], 78) // the sequence number
		b.SetChecksum(b.CalculateChecksum(ip6.PseudoHeaderChecksum(ProtoICMPv6, ip6.PayloadLength())))
		p = gopacket.NewPacket(data, layers.LayerTypeIPv6, noCopy)
		ge, ok := p.Layer(layers.LayerTypeICMPv6Echo).(*layers.ICMPv6Echo)
		if !ok || ge.Identifier != 77 || ge.SeqNumber != 78 {
			t.Fatalf("setters not seen by gopacket: %v", p)
		}
	}
}

func TestVXLANAgainstGopacket(t *testing.T) {
	r := newRand()
	for i := 0; i < 200; i++ {
		vni := r.Uint32() & MaxVNI
		data := serialize(t, &layers.VXLAN{ValidIDFlag: true, VNI: vni}, gopacket.Payload(randBytes(r, 20)))
		g := &layers.VXLAN{}
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		b := VXLAN(data).Fixed()
		if b.VNI() != g.VNI || (b.Flags()&VXLANFlagI != 0) != g.ValidIDFlag {
			t.Fatalf("mismatch: %+v", g)
		}
		vni = r.Uint32() & MaxVNI
		clear(b)
		b.Init(vni)
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil || g.VNI != vni || !g.ValidIDFlag ||
			b.VNI() != vni || b.Flags() != VXLANFlagI {
			t.Fatalf("Init not seen by gopacket: %+v", g)
		}
	}
}

// buildGeneve writes a Geneve header with options of the given data lengths
// (in 4-byte words).
func buildGeneve(r *rand.Rand, vni uint32, flags uint8, optWords []int) []byte {
	total := 0
	for _, w := range optWords {
		total += 1 + w
	}
	b := make([]byte, GeneveMinLen+4*total, GeneveMinLen+4*total+14)
	Geneve(b).Init(vni)
	b[0] = uint8(total) // version 0, Opt Len
	b[1] = flags
	off := GeneveMinLen
	for _, w := range optWords {
		binary.BigEndian.PutUint16(b[off:], uint16(r.Uint32()))
		b[off+2] = uint8(r.Uint32())
		b[off+3] = uint8(w)
		copy(b[off+4:], randBytes(r, 4*w))
		off += 4 + 4*w
	}
	return append(b, randBytes(r, 14)...) // an inner Ethernet header follows
}

func TestGeneveAgainstGopacket(t *testing.T) {
	r := newRand()
	for i := 0; i < 300; i++ {
		// gopacket reads only 4 bits of an option's length (the RFC has 5),
		// so options compared with it stay under 16 words.
		var words []int
		for n := r.IntN(5); n > 0; n-- {
			words = append(words, r.IntN(8))
		}
		vni, flags := r.Uint32()&MaxVNI, uint8(r.IntN(4))<<6
		data := buildGeneve(r, vni, flags, words)
		g := &layers.Geneve{}
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		b := Geneve(data).Fixed()
		hl := b.HeaderLength()
		if hl != GeneveMinLen+int(g.OptionsLength) || hl != len(g.Contents) || !bytes.Equal(data[hl:], g.Payload) {
			t.Fatalf("header length %d; gopacket options length %d", hl, g.OptionsLength)
		}
		if b.Version() != g.Version || int(b.OptLen())*4 != int(g.OptionsLength) || b.OAM() != g.OAMPacket ||
			b.Critical() != g.CriticalOption || b.ProtocolType() != uint16(g.Protocol) || b.VNI() != g.VNI {
			t.Fatalf("field mismatch: %+v", g)
		}
		if vni != g.VNI || (flags&GeneveFlagO != 0) != g.OAMPacket || (flags&GeneveFlagC != 0) != g.CriticalOption ||
			g.Protocol != layers.EthernetType(EtherTypeTEB) {
			t.Fatalf("buildGeneve (Init) not seen by gopacket: %+v", g)
		}
	}
}

func TestHeaderAccessorsDoNotAllocate(t *testing.T) {
	r := newRand()
	eth := make([]byte, 1514)
	copy(eth, randBytes(r, len(eth)))
	binary.BigEndian.PutUint16(eth[12:], EtherTypeVLAN)
	binary.BigEndian.PutUint16(eth[16:], EtherTypeIPv4)
	ip := serialize(t, &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolIPv6Destination, HopLimit: 9,
		SrcIP: net.IP(randBytes(r, 16)), DstIP: net.IP(randBytes(r, 16))},
		gopacket.Payload(append([]byte{byte(ProtoUDP), 0, 1, 4, 0, 0, 0, 0}, make([]byte, 20)...)))
	binary.BigEndian.PutUint16(ip[IPv6Len+8+4:], 20) // the UDP length
	ip4 := serialize(t, randIPv4(r), gopacket.Payload(make([]byte, 20)))
	gen := buildGeneve(r, 9, 0, []int{1, 2})
	var sink int
	n := testing.AllocsPerRun(100, func() {
		e := Ethernet(eth).Fixed()
		e.SetSrcMAC([6]byte(eth[:6]))
		e.SetDstMAC([6]byte(eth[6:12]))
		sink += int(e.EtherType())
		v4 := IPv4(ip4)
		a4 := v4.SrcAddr()
		v4.SetSrcAddr(a4)
		sink += int(v4.TTL()) + int(v4.FragmentOffset()) + int(v4.CalculateChecksum()) + int(v4.DecTTL())
		v6 := IPv6(ip)
		x := v6.WalkExtensionsStopAtAH()
		a := v6.SrcAddr()
		v6.SetDstAddr(a)
		sink += x.Offset + int(x.Proto) + int(v6.HopLimit()) + int(v6.PseudoHeaderChecksum(ProtoUDP, 4))
		u := UDP(ip[x.Offset:]).Fixed()
		u.SetSrcPort(u.SrcPort() + 1)
		u.SetChecksum(UDPChecksumValue(ChecksumApplyDelta(u.Checksum(), ChecksumDelta(a[:], a[:]))))
		tc := TCP(ip[IPv6Len:]).Fixed()
		sink += int(tc.DataOffset()) + int(tc.Flags())
		ic := ICMPv6(ip[IPv6Len:]).Fixed()
		ic.Encode(&ICMPFields{Type: ICMPv6PacketTooBig, Rest: 1280})
		sink += int(ic.Ident())
		ic4 := ICMPv4(ip[IPv6Len:])
		sink += int(ic4.Fixed().Ident()) + int(ic4.CalculateChecksum())
		g := Geneve(gen).Fixed()
		sink += g.HeaderLength() + int(g.VNI())
		vx := VXLAN(gen).Fixed()
		vx.Init(vx.VNI())
		sink += int(vx.VNI())
	})
	if n != 0 {
		t.Fatalf("header views allocate %v times per run", n)
	}
	_ = sink
}
