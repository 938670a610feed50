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

// serialize builds a packet with gopacket, lengths and checksums filled in.
func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatalf("gopacket serialize: %v", err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// offsetOf returns where layer l starts inside data; the packet must have
// been decoded with gopacket.NoCopy so its layers alias data.
func offsetOf(data []byte, l gopacket.Layer) int {
	return cap(data) - cap(l.LayerContents())
}

var noCopy = gopacket.DecodeOptions{NoCopy: true}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func randMAC(r *rand.Rand) net.HardwareAddr { return net.HardwareAddr(randBytes(r, 6)) }

func TestEthernetAgainstGopacket(t *testing.T) {
	r := newRand()
	for i := 0; i < 200; i++ {
		ntags := i % 3
		eth := &layers.Ethernet{SrcMAC: randMAC(r), DstMAC: randMAC(r), EthernetType: layers.EthernetTypeIPv4}
		ls := []gopacket.SerializableLayer{eth}
		prev := &eth.EthernetType
		for k := 0; k < ntags; k++ {
			tpid := layers.EthernetTypeDot1Q
			if k == 0 && r.IntN(2) == 0 {
				tpid = layers.EthernetTypeQinQ
			}
			*prev = tpid
			q := &layers.Dot1Q{VLANIdentifier: uint16(r.IntN(4096)), Priority: uint8(r.IntN(8)), Type: layers.EthernetTypeIPv4}
			ls = append(ls, q)
			prev = &q.Type
		}
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IP(randBytes(r, 4)), DstIP: net.IP(randBytes(r, 4))}
		udp := &layers.UDP{SrcPort: 1, DstPort: 2}
		udp.SetNetworkLayerForChecksum(ip)
		ls = append(ls, ip, udp, gopacket.Payload(randBytes(r, r.IntN(30))))
		data := serialize(t, ls...)

		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, noCopy)
		geth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		gip := p.Layer(layers.LayerTypeIPv4)
		if gip == nil {
			t.Fatalf("gopacket did not find IPv4: %v", p.ErrorLayer())
		}
		e := Ethernet(data).Fixed()
		if e.EtherType() != uint16(geth.EthernetType) {
			t.Fatalf("EtherType %#x want %#x", e.EtherType(), geth.EthernetType)
		}
		// Each tag's TPID sits VLANLen bytes after the previous one and the
		// final EtherType right before the IP header, as gateway/parse.go
		// reads them.
		off := EthernetLen
		for k := 0; k < ntags; k++ {
			if et := Ethernet(data[k*VLANLen:]).Fixed().EtherType(); et != EtherTypeVLAN && et != EtherTypeQinQ {
				t.Fatalf("tag %d: TPID %#x", k, et)
			}
			off += VLANLen
		}
		if off != offsetOf(data, gip) || binary.BigEndian.Uint16(data[off-2:]) != EtherTypeIPv4 {
			t.Fatalf("%d tags: IPv4 at %d, gopacket %d", ntags, off, offsetOf(data, gip))
		}
		// Setters, read back through gopacket.
		m1, m2 := [6]byte(randBytes(r, 6)), [6]byte(randBytes(r, 6))
		e.SetDstMAC(m1)
		e.SetSrcMAC(m2)
		p = gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		geth = p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		if !bytes.Equal(geth.DstMAC, m1[:]) || !bytes.Equal(geth.SrcMAC, m2[:]) {
			t.Fatal("SetDstMAC/SetSrcMAC not seen by gopacket")
		}
		e.SetEtherType(EtherTypeIPv6)
		if g := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeEthernet).(*layers.Ethernet); g.EthernetType != layers.EthernetTypeIPv6 {
			t.Fatal("SetEtherType not seen by gopacket")
		}
	}
}

func randIPv4(r *rand.Rand) *layers.IPv4 {
	ip := &layers.IPv4{
		Version: 4, TOS: uint8(r.Uint32()), Id: uint16(r.Uint32()),
		Flags: layers.IPv4Flag(r.IntN(8)), FragOffset: uint16(r.IntN(1 << 13)),
		TTL: uint8(r.Uint32()), Protocol: layers.IPProtocolUDP,
		SrcIP: net.IP(randBytes(r, 4)), DstIP: net.IP(randBytes(r, 4)),
	}
	for n := r.IntN(12); n > 0; n-- {
		ip.Options = append(ip.Options, layers.IPv4Option{OptionType: 1}) // NOP
	}
	if len(ip.Options) > 0 {
		ip.Options = append(ip.Options, layers.IPv4Option{OptionType: 0}) // EOL
	}
	return ip
}

func TestIPv4AgainstGopacket(t *testing.T) {
	r := newRand()
	for i := 0; i < 500; i++ {
		data := serialize(t, randIPv4(r), gopacket.Payload(randBytes(r, r.IntN(100))))
		// Trailing link-layer padding must not confuse the view.
		pkt := append(data, randBytes(r, r.IntN(3))...)
		g := &layers.IPv4{}
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		b := IPv4(pkt)
		if !ipv4Valid(pkt) {
			t.Fatalf("valid packet rejected: % x", data[:20])
		}
		if b.Version() != g.Version || b.HeaderLength() != int(g.IHL)*4 ||
			b.TotalLength() != g.Length || b.ID() != g.Id ||
			b.Flags() != uint8(g.Flags) || b.FragmentOffset() != g.FragOffset*8 ||
			b.MoreFragments() != (g.Flags&layers.IPv4MoreFragments != 0) ||
			b.DontFragment() != (g.Flags&layers.IPv4DontFragment != 0) ||
			b.IsFragment() != (g.FragOffset != 0 || g.Flags&layers.IPv4MoreFragments != 0) ||
			b.TTL() != g.TTL || b.Protocol() != uint8(g.Protocol) || b.Checksum() != g.Checksum {
			t.Fatalf("field mismatch: view %v, gopacket %+v", []byte(b[:20]), g)
		}
		if s := b.SrcAddr(); !bytes.Equal(s[:], g.SrcIP) {
			t.Fatalf("SrcAddr %v want %v", s, g.SrcIP)
		}
		if d := b.DstAddr(); !bytes.Equal(d[:], g.DstIP) {
			t.Fatalf("DstAddr %v want %v", d, g.DstIP)
		}
		if c := b.CalculateChecksum(); c != g.Checksum || !ipv4ChecksumOK(b) {
			t.Fatalf("CalculateChecksum %#x want %#x", c, g.Checksum)
		}

		// Encode, then a DecTTL, read back through gopacket.
		id, ttl, tos := uint16(r.Uint32()), uint8(r.IntN(255)+1), uint8(r.Uint32())
		flags, frag := uint8(r.IntN(8)), uint16(r.IntN(1<<13))*8
		src, dst := [4]byte(randBytes(r, 4)), [4]byte(randBytes(r, 4))
		b.Encode(&IPv4Fields{TOS: tos, TotalLength: b.TotalLength(), ID: id, Flags: flags, FragmentOffset: frag,
			TTL: ttl, Protocol: ProtoTCP, SrcAddr: src, DstAddr: dst})
		b.SetChecksum(b.CalculateChecksum())
		newTTL := b.DecTTL()
		if !ipv4ChecksumOK(b) || newTTL != ttl-1 {
			t.Fatalf("DecTTL: ttl %d checksum valid %v", newTTL, ipv4ChecksumOK(b))
		}
		if err := g.DecodeFromBytes(pkt, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		if g.Id != id || g.TTL != ttl-1 || g.TOS != tos || uint8(g.Flags) != flags || g.FragOffset*8 != frag ||
			g.Protocol != layers.IPProtocolTCP || !g.SrcIP.Equal(net.IP(src[:])) || !g.DstIP.Equal(net.IP(dst[:])) {
			t.Fatalf("setters not seen by gopacket: %+v", g)
		}
		b.SetTotalLength(uint16(len(data) - 1))
		b.SetHeaderLength(IPv4MinLen)
		if err := g.DecodeFromBytes(pkt, gopacket.NilDecodeFeedback); err != nil || g.Length != uint16(len(data)-1) || g.IHL != 5 {
			t.Fatalf("SetTotalLength/SetHeaderLength not seen by gopacket: %v %+v", err, g)
		}
	}
}

func TestIPv6AgainstGopacket(t *testing.T) {
	r := newRand()
	for i := 0; i < 300; i++ {
		ip := &layers.IPv6{Version: 6, TrafficClass: uint8(r.Uint32()), FlowLabel: r.Uint32() & 0xfffff,
			NextHeader: layers.IPProtocolUDP, HopLimit: uint8(r.Uint32()),
			SrcIP: net.IP(randBytes(r, 16)), DstIP: net.IP(randBytes(r, 16))}
		data := serialize(t, ip, gopacket.Payload(randBytes(r, 2+r.IntN(100))))
		g := &layers.IPv6{}
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		b := IPv6(data)
		if b.Version() != g.Version || b.PayloadLength() != g.Length || b.NextHeader() != uint8(g.NextHeader) || b.HopLimit() != g.HopLimit {
			t.Fatalf("field mismatch: %+v", g)
		}
		if s, d := b.SrcAddr(), b.DstAddr(); !bytes.Equal(s[:], g.SrcIP) || !bytes.Equal(d[:], g.DstIP) {
			t.Fatal("address mismatch")
		}
		tc, fl, hl := uint8(r.Uint32()), r.Uint32()&0xfffff, uint8(r.Uint32())
		src, dst := [16]byte(randBytes(r, 16)), [16]byte(randBytes(r, 16))
		b.SetVersionTrafficClassFlowLabel(tc, fl)
		b.SetHopLimit(hl)
		b.SetNextHeader(ProtoTCP)
		b.SetSrcAddr(src)
		b.SetDstAddr(dst)
		b.SetPayloadLength(uint16(len(data) - IPv6Len - 1))
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		if g.Version != 6 || g.TrafficClass != tc || g.FlowLabel != fl || g.HopLimit != hl || g.NextHeader != layers.IPProtocolTCP ||
			!g.SrcIP.Equal(net.IP(src[:])) || !g.DstIP.Equal(net.IP(dst[:])) || int(g.Length) != len(data)-IPv6Len-1 {
			t.Fatalf("setters not seen by gopacket: %+v", g)
		}
	}
}
