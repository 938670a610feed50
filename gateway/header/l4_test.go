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
		if !ip.IsValid(len(pkt)) {
			t.Fatal("bad IPv6")
		}
		return ip.Payload(), ip.PseudoHeaderChecksum(proto, ip.PayloadLength())
	}
	ip := IPv4(pkt)
	if !ip.IsValid(len(pkt)) {
		t.Fatal("bad IPv4")
	}
	return ip.Payload(), ip.PseudoHeaderChecksum(proto, ip.TotalLength()-uint16(ip.HeaderLength()))
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
		b := UDP(seg)
		if !b.IsValid(len(seg)) || b.IsValid(int(b.Length())-1) {
			t.Fatal("IsValid wrong about length")
		}
		if b.SrcPort() != uint16(g.SrcPort) || b.DstPort() != uint16(g.DstPort) || b.Length() != g.Length ||
			b.Checksum() != g.Checksum || !bytes.Equal(b.Payload(), g.Payload) {
			t.Fatalf("field mismatch: %+v", g)
		}
		// gopacket does not apply RFC 768's 0 → 0xffff rule; we do.
		if c := b.CalculateChecksum(pseudo); c != UDPChecksumValue(g.Checksum) {
			t.Fatalf("CalculateChecksum %#x want %#x", c, g.Checksum)
		}

		// NAT-style rewrite with incremental updates, then full check.
		sp, dp := uint16(r.Uint32()), uint16(r.Uint32())
		b.UpdateChecksum16(b.SrcPort(), sp)
		b.SetSrcPort(sp)
		b.UpdateChecksum16(b.DstPort(), dp)
		b.SetDstPort(dp)
		var newPseudo uint32
		if v6 {
			ip6 := IPv6(data)
			old, nw := ip6.SrcAddr(), [16]byte(randBytes(r, 16))
			ip6.SetSrcAddr(nw)
			b.UpdateChecksumAddr(old[:], nw[:])
			newPseudo = ip6.PseudoHeaderChecksum(ProtoUDP, ip6.PayloadLength())
		} else {
			ip4 := IPv4(data)
			old, nw := ip4.DstAddr(), [4]byte(randBytes(r, 4))
			ip4.SetDstAddr(nw)
			b.UpdateChecksumAddr(old[:], nw[:])
			newPseudo = ip4.PseudoHeaderChecksum(ProtoUDP, b.Length())
		}
		if got, want := b.Checksum(), b.CalculateChecksum(newPseudo); !equivalent(got, want) || got == 0 {
			t.Fatalf("incremental UDP checksum %#x, recomputed %#x", got, want)
		}
		b.SetLength(b.Length())
		b.SetChecksum(0)
		b.UpdateChecksum16(1, 2)
		if b.Checksum() != 0 {
			t.Fatal("UDP checksum 0 (none) was changed by an update")
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
		if !b.IsValid(len(seg)) {
			t.Fatal("valid TCP rejected")
		}
		flags := uint8(0)
		for k, f := range []bool{g.FIN, g.SYN, g.RST, g.PSH, g.ACK, g.URG, g.ECE, g.CWR} {
			if f {
				flags |= 1 << k
			}
		}
		if b.SrcPort() != uint16(g.SrcPort) || b.DstPort() != uint16(g.DstPort) || b.Seq() != g.Seq || b.Ack() != g.Ack ||
			b.DataOffset() != int(g.DataOffset)*4 || b.Flags() != flags || b.Window() != g.Window ||
			b.Checksum() != g.Checksum || b.UrgentPointer() != g.Urgent || !bytes.Equal(b.Options(), g.Contents[TCPMinLen:]) {
			t.Fatalf("field mismatch: %+v", g)
		}
		if c := b.CalculateChecksum(pseudo); c != g.Checksum {
			t.Fatalf("CalculateChecksum %#x want %#x", c, g.Checksum)
		}
		// Setters with incremental checksum updates, then gopacket reads back.
		sp, seq, ack := uint16(r.Uint32()), r.Uint32(), r.Uint32()
		c := ChecksumUpdate16(b.Checksum(), b.SrcPort(), sp)
		c = ChecksumUpdate32(c, b.Seq(), seq)
		c = ChecksumUpdate32(c, b.Ack(), ack)
		b.SetSrcPort(sp)
		b.SetSeq(seq)
		b.SetAck(ack)
		b.SetChecksum(c)
		if want := b.CalculateChecksum(pseudo); !equivalent(c, want) {
			t.Fatalf("incremental TCP checksum %#x, recomputed %#x", c, want)
		}
		b.SetDstPort(7)
		b.SetFlags(TCPFlagSYN | TCPFlagACK)
		b.SetWindow(1000)
		b.SetUrgentPointer(3)
		b.SetDataOffset(b.DataOffset())
		if err := g.DecodeFromBytes(seg, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		if uint16(g.SrcPort) != sp || g.DstPort != 7 || g.Seq != seq || g.Ack != ack || !g.SYN || !g.ACK || g.FIN ||
			g.Window != 1000 || g.Urgent != 3 || g.Checksum != c {
			t.Fatalf("setters not seen by gopacket: %+v", g)
		}
	}
	// Data offsets below 5 words or beyond the segment are invalid.
	seg := make([]byte, 40)
	for _, tc := range []struct {
		off  byte
		n    int
		want bool
	}{{4 << 4, 40, false}, {5 << 4, 40, true}, {10 << 4, 40, true}, {11 << 4, 40, false}, {5 << 4, 19, false}} {
		seg[12] = tc.off
		if got := TCP(seg[:tc.n]).IsValid(tc.n); got != tc.want {
			t.Errorf("data offset byte %#x len %d: IsValid %v", tc.off, tc.n, got)
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
			b.Ident() != g.Id || b.Seq() != g.Seq || !bytes.Equal(b.Payload(), g.Payload) {
			t.Fatalf("field mismatch: %+v", g)
		}
		if b.IsError() != (i%4 >= 2) {
			t.Fatalf("IsError wrong for %v", g.TypeCode)
		}
		if i%4 == 2 && b.MTU() != g.Seq {
			t.Fatalf("MTU %d want %d", b.MTU(), g.Seq)
		}
		if c := b.CalculateChecksum(); c != g.Checksum {
			t.Fatalf("CalculateChecksum %#x want %#x", c, g.Checksum)
		}
		id := uint16(r.Uint32())
		b.SetChecksum(ChecksumUpdate16(b.Checksum(), b.Ident(), id))
		b.SetIdent(id)
		b.SetSeq(9)
		b.SetType(ICMPv4DstUnreachable)
		b.SetCode(ICMPv4FragNeeded)
		b.SetMTU(1400)
		b.SetChecksum(b.CalculateChecksum())
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		if g.TypeCode != layers.CreateICMPv4TypeCode(3, 4) || g.Id != id || g.Seq != 1400 || b.Seq() != 1400 {
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
			if b.Ident() != ge.Identifier || b.Seq() != ge.SeqNumber || b.IsError() || !bytes.Equal(b.Payload(), echoData) {
				t.Fatalf("echo mismatch: %+v", ge)
			}
		} else if b.MTU() != binary.BigEndian.Uint32(g.Payload) || !b.IsError() || !bytes.Equal(b.Payload(), g.Payload[4:]) {
			t.Fatalf("packet too big mismatch: MTU %d", b.MTU())
		}
		// Rewrite the destination address: ICMPv6 covers the pseudo-header.
		ip6 := IPv6(data)
		old, nw := ip6.DstAddr(), [16]byte(randBytes(r, 16))
		ip6.SetDstAddr(nw)
		b.SetChecksum(ChecksumUpdateAddr(b.Checksum(), old[:], nw[:]))
		if want := b.CalculateChecksum(ip6.PseudoHeaderChecksum(ProtoICMPv6, ip6.PayloadLength())); !equivalent(b.Checksum(), want) {
			t.Fatalf("incremental ICMPv6 checksum %#x, recomputed %#x", b.Checksum(), want)
		}
		b.SetType(ICMPv6EchoReply)
		b.SetCode(0)
		b.SetIdent(77)
		b.SetSeq(78)
		b.SetChecksum(b.CalculateChecksum(ip6.PseudoHeaderChecksum(ProtoICMPv6, ip6.PayloadLength())))
		p = gopacket.NewPacket(data, layers.LayerTypeIPv6, noCopy)
		ge, ok := p.Layer(layers.LayerTypeICMPv6Echo).(*layers.ICMPv6Echo)
		if !ok || ge.Identifier != 77 || ge.SeqNumber != 78 {
			t.Fatalf("setters not seen by gopacket: %v", p)
		}
		b.SetMTU(1500)
		if b.MTU() != 1500 || b.Ident() != 0 || b.Seq() != 1500 {
			t.Fatal("SetMTU must write bytes 4–7")
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
		b := VXLAN(data)
		if !b.IsValid() || b.VNI() != g.VNI || (b.Flags()&VXLANFlagI != 0) != g.ValidIDFlag || !bytes.Equal(b.Payload(), g.Payload) {
			t.Fatalf("mismatch: %+v", g)
		}
		vni = r.Uint32() & MaxVNI
		b.SetVNI(vni)
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil || g.VNI != vni || !g.ValidIDFlag {
			t.Fatalf("SetVNI not seen by gopacket: %+v", g)
		}
		b.SetFlags(0)
		if b.IsValid() {
			t.Fatal("VXLAN without I flag accepted")
		}
		clear(b[:VXLANLen])
		b.Init(vni)
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil || g.VNI != vni || !g.ValidIDFlag || !b.IsValid() {
			t.Fatalf("Init not seen by gopacket: %+v", g)
		}
	}
	if VXLAN(make([]byte, 7)).IsValid() {
		t.Fatal("short VXLAN accepted")
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
	g := Geneve(b)
	g.Init(vni)
	g.SetOptLen(uint8(total))
	g.SetFlags(flags)
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
		b := Geneve(data)
		hl, st := b.Validate(len(data))
		if st != GeneveOK || hl != GeneveMinLen+int(g.OptionsLength) || hl != len(g.Contents) {
			t.Fatalf("Validate = %d,%v; gopacket options length %d", hl, st, g.OptionsLength)
		}
		if b.Version() != g.Version || int(b.OptLen())*4 != int(g.OptionsLength) || b.OAM() != g.OAMPacket ||
			b.Critical() != g.CriticalOption || b.ProtocolType() != uint16(g.Protocol) || b.VNI() != g.VNI ||
			!bytes.Equal(b.Payload(), g.Payload) || b.HeaderLength() != hl || len(b.Options()) != int(g.OptionsLength) {
			t.Fatalf("field mismatch: %+v", g)
		}
		k := 0
		for off := GeneveMinLen; off < hl; k++ {
			next, ok := b.NextOption(off, hl)
			if !ok || k >= len(g.Options) {
				t.Fatalf("option %d at %d: ok %v, gopacket has %d", k, off, ok, len(g.Options))
			}
			class, typ, odata := b.Option(off)
			if class != g.Options[k].Class || typ != g.Options[k].Type || !bytes.Equal(odata, g.Options[k].Data) {
				t.Fatalf("option %d mismatch: %#x %#x vs %+v", k, class, typ, g.Options[k])
			}
			off = next
		}
		if k != len(g.Options) {
			t.Fatalf("walked %d options, gopacket %d", k, len(g.Options))
		}
		vni = r.Uint32() & MaxVNI
		b.SetVNI(vni)
		b.SetProtocolType(EtherTypeIPv4)
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil || g.VNI != vni || g.Protocol != layers.EthernetTypeIPv4 {
			t.Fatalf("setters not seen by gopacket: %+v", g)
		}
		// Any truncation inside the header is caught.
		for n := 0; n < hl; n++ {
			if _, st := Geneve(data[:n]).Validate(n); st == GeneveOK {
				t.Fatalf("truncated to %d of %d accepted", n, hl)
			}
		}
	}
}

func TestGeneveOptionRules(t *testing.T) {
	r := newRand()
	// A 5-bit option length (31 words) is legal (RFC 8926 §3.5).
	data := buildGeneve(r, 5, GeneveFlagC, []int{31, 0})
	b := Geneve(data)
	if hl, st := b.Validate(len(data)); st != GeneveOK || hl != GeneveMinLen+4*33 {
		t.Fatalf("31-word option: %d, %v", hl, st)
	}
	if _, _, d := b.Option(GeneveMinLen); len(d) != 124 {
		t.Fatalf("31-word option data is %d bytes", len(d))
	}
	// An option whose length runs past Opt Len is rejected.
	data = buildGeneve(r, 5, 0, []int{2, 1})
	data[GeneveMinLen+3] = 3 // first option now claims 3 words: ends past the area
	if _, st := Geneve(data).Validate(len(data)); st != GeneveBadOption {
		t.Fatalf("overlong option: %v", st)
	}
	// Opt Len leaves room for less than an option header.
	data = buildGeneve(r, 5, 0, []int{0})
	data[GeneveMinLen+4+3] = 0 // the next word, read as an option, has no data
	data[0] = 2                // Opt Len 2: two data-less options fill the area exactly
	if _, st := Geneve(data).Validate(len(data)); st != GeneveOK {
		t.Fatalf("two empty options: %v", st)
	}
	data[0] = 0x40 // version 1
	if _, st := Geneve(data).Validate(len(data)); st != GeneveBadVersion {
		t.Fatalf("version 1: %v", st)
	}
	data[0] = 63 // Opt Len 63: past the packet
	if _, st := Geneve(data).Validate(len(data)); st != GeneveTruncated {
		t.Fatalf("Opt Len past packet: %v", st)
	}
	if _, ok := Geneve(data).NextOption(4, 8); ok {
		t.Fatal("NextOption accepted an offset inside the fixed header")
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
		e := Ethernet(eth)
		et, off, ok := e.PayloadOffset()
		d, s := e.DstMAC(), e.SrcMAC()
		e.SetSrcMAC(d)
		e.SetDstMAC(s)
		sink += int(et) + off + int(e.VLANID())
		if ok {
			sink++
		}
		v4 := IPv4(ip4)
		if v4.IsValid(len(ip4)) {
			a, b16 := v4.SrcAddr(), v4.DstAddr16()
			v4.SetSrcAddr(a)
			sink += int(v4.TTL()) + int(b16[15]) + int(v4.FragmentOffset()) + int(v4.CalculateChecksum()) + len(v4.Payload())
		}
		v6 := IPv6(ip)
		if v6.IsValid(len(ip)) {
			x := v6.WalkExtensions()
			a := v6.SrcAddr()
			v6.SetDstAddr(a)
			sink += x.Offset + int(x.Proto) + int(v6.HopLimit())
			u := UDP(ip[x.Offset:])
			if !u.IsValid(len(u)) {
				panic("setup: bad UDP")
			}
			u.SetSrcPort(u.SrcPort() + 1)
			u.UpdateChecksumAddr(a[:], a[:])
			sink += int(u.CalculateChecksum(v6.PseudoHeaderChecksum(ProtoUDP, 4)))
			tc := TCP(ip[IPv6Len:])
			sink += int(tc.Seq()) + int(tc.Flags())
			ic := ICMPv6(ip[IPv6Len:])
			sink += int(ic.MTU()) + len(ic.Payload())
			ic4 := ICMPv4(ip[IPv6Len:])
			sink += int(ic4.MTU()) + int(ic4.CalculateChecksum())
		}
		g := Geneve(gen)
		if hl, st := g.Validate(len(gen)); st == GeneveOK {
			_, _, od := g.Option(GeneveMinLen)
			sink += hl + int(g.VNI()) + len(od)
		}
		vx := VXLAN(gen)
		vx.SetVNI(vx.VNI())
		sink += int(vx.VNI())
	})
	if n != 0 {
		t.Fatalf("header views allocate %v times per run", n)
	}
	_ = sink
}
