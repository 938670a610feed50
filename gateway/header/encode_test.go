package header

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// serializeAsIs builds a layer with gopacket as given: no lengths fixed, no
// checksums computed, so that every field is the test's.
func serializeAsIs(t *testing.T, l gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := l.SerializeTo(buf, gopacket.SerializeOptions{}); err != nil {
		t.Fatalf("gopacket serialize: %v", err)
	}
	return buf.Bytes()
}

// encodeInto runs encode on a buffer of n random bytes with random bytes
// after it, and fails if encode wrote past the header.
func encodeInto(t *testing.T, r interface{ Uint32() uint32 }, n int, encode func([]byte)) []byte {
	t.Helper()
	b := make([]byte, n+8)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	tail := bytes.Clone(b[n:])
	encode(b)
	if !bytes.Equal(b[n:], tail) {
		t.Fatalf("Encode wrote past its %d bytes", n)
	}
	return b[:n]
}

func TestIPv4EncodeAgainstGopacket(t *testing.T) {
	r := newRand()
	for range 500 {
		f := IPv4Fields{TOS: uint8(r.Uint32()), TotalLength: uint16(r.Uint32()), ID: uint16(r.Uint32()),
			Flags: uint8(r.IntN(8)), FragmentOffset: uint16(r.IntN(8192)) * 8, TTL: uint8(r.Uint32()),
			Protocol: uint8(r.Uint32()), SrcAddr: [4]byte(randBytes(r, 4)), DstAddr: [4]byte(randBytes(r, 4))}
		got := encodeInto(t, r, IPv4MinLen, func(b []byte) { IPv4(b).Encode(&f) })
		want := serializeAsIs(t, &layers.IPv4{Version: 4, IHL: 5, TOS: f.TOS, Length: f.TotalLength, Id: f.ID,
			Flags: layers.IPv4Flag(f.Flags), FragOffset: f.FragmentOffset / 8, TTL: f.TTL,
			Protocol: layers.IPProtocol(f.Protocol), SrcIP: net.IP(f.SrcAddr[:]), DstIP: net.IP(f.DstAddr[:])})
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v:\nEncode   % x\ngopacket % x", f, got, want)
		}
	}
}

func TestIPv6EncodeAgainstGopacket(t *testing.T) {
	r := newRand()
	for range 500 {
		f := IPv6Fields{TrafficClass: uint8(r.Uint32()), FlowLabel: r.Uint32() & 0xfffff, PayloadLength: uint16(r.Uint32()),
			NextHeader: uint8(r.Uint32()), HopLimit: uint8(r.Uint32()),
			SrcAddr: [16]byte(randBytes(r, 16)), DstAddr: [16]byte(randBytes(r, 16))}
		if f.NextHeader == ProtoHopByHop {
			f.NextHeader = ProtoTCP // gopacket would want the Hop-by-Hop header itself
		}
		got := encodeInto(t, r, IPv6Len, func(b []byte) { IPv6(b).Encode(&f) })
		want := serializeAsIs(t, &layers.IPv6{Version: 6, TrafficClass: f.TrafficClass, FlowLabel: f.FlowLabel,
			Length: f.PayloadLength, NextHeader: layers.IPProtocol(f.NextHeader), HopLimit: f.HopLimit,
			SrcIP: net.IP(f.SrcAddr[:]), DstIP: net.IP(f.DstAddr[:])})
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v:\nEncode   % x\ngopacket % x", f, got, want)
		}
	}
}

func TestTCPEncodeAgainstGopacket(t *testing.T) {
	r := newRand()
	for range 500 {
		f := TCPFields{SrcPort: uint16(r.Uint32()), DstPort: uint16(r.Uint32()), Seq: r.Uint32(), Ack: r.Uint32(),
			DataOffset: uint8(5+r.IntN(11)) * 4, Flags: uint8(r.Uint32()), Window: uint16(r.Uint32()), Urgent: uint16(r.Uint32())}
		got := encodeInto(t, r, TCPMinLen, func(b []byte) { TCP(b).Encode(&f) })
		want := serializeAsIs(t, &layers.TCP{SrcPort: layers.TCPPort(f.SrcPort), DstPort: layers.TCPPort(f.DstPort),
			Seq: f.Seq, Ack: f.Ack, DataOffset: f.DataOffset / 4,
			FIN: f.Flags&TCPFlagFIN != 0, SYN: f.Flags&TCPFlagSYN != 0, RST: f.Flags&TCPFlagRST != 0,
			PSH: f.Flags&TCPFlagPSH != 0, ACK: f.Flags&TCPFlagACK != 0, URG: f.Flags&TCPFlagURG != 0,
			ECE: f.Flags&TCPFlagECE != 0, CWR: f.Flags&TCPFlagCWR != 0,
			Window: f.Window, Urgent: f.Urgent})
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v:\nEncode   % x\ngopacket % x", f, got, want)
		}
	}
}

func TestEthernetEncodeAgainstGopacket(t *testing.T) {
	r := newRand()
	for range 500 {
		f := EthernetFields{DstMAC: [6]byte(randBytes(r, 6)), SrcMAC: [6]byte(randBytes(r, 6)), Type: uint16(r.Uint32())}
		got := encodeInto(t, r, EthernetLen, func(b []byte) { Ethernet(b).Encode(&f) })
		// gopacket pads a frame to the 60-byte minimum: only the header is compared.
		want := serializeAsIs(t, &layers.Ethernet{DstMAC: f.DstMAC[:], SrcMAC: f.SrcMAC[:], EthernetType: layers.EthernetType(f.Type)})
		if !bytes.Equal(got, want[:EthernetLen]) {
			t.Fatalf("%+v:\nEncode   % x\ngopacket % x", f, got, want[:EthernetLen])
		}
	}
}

func TestICMPv4EncodeAgainstGopacket(t *testing.T) {
	r := newRand()
	for range 500 {
		f := ICMPFields{Type: uint8(r.Uint32()), Code: uint8(r.Uint32()), Rest: r.Uint32()}
		got := encodeInto(t, r, ICMPv4MinLen, func(b []byte) { ICMPv4(b).Encode(&f) })
		want := serializeAsIs(t, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(f.Type, f.Code),
			Id: uint16(f.Rest >> 16), Seq: uint16(f.Rest)})
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v:\nEncode   % x\ngopacket % x", f, got, want)
		}
	}
	// A fragmentation needed error as gopacket reads it back: the
	// next-hop MTU in the low half of the second word (RFC 1191).
	f := ICMPFields{Type: ICMPv4DstUnreachable, Code: ICMPv4FragNeeded, Rest: 1400}
	b := make([]byte, ICMPv4MinLen)
	ICMPv4(b).Encode(&f)
	g := &layers.ICMPv4{}
	if err := g.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
		t.Fatal(err)
	}
	if g.TypeCode != layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodeFragmentationNeeded) ||
		g.Id != 0 || g.Seq != 1400 {
		t.Fatalf("gopacket reads %v id %d seq %d", g.TypeCode, g.Id, g.Seq)
	}
}

// gopacket writes only the first word of ICMPv6 (the rest is its payload),
// so ICMPv6.Encode is checked by decoding.
func TestICMPv6EncodeAgainstGopacket(t *testing.T) {
	r := newRand()
	for range 500 {
		f := ICMPFields{Type: uint8(r.Uint32()), Code: uint8(r.Uint32()), Rest: r.Uint32()}
		got := encodeInto(t, r, ICMPv6MinLen, func(b []byte) { ICMPv6(b).Encode(&f) })
		g := &layers.ICMPv6{}
		if err := g.DecodeFromBytes(got, gopacket.NilDecodeFeedback); err != nil {
			t.Fatal(err)
		}
		if g.TypeCode != layers.CreateICMPv6TypeCode(f.Type, f.Code) || g.Checksum != 0 ||
			len(g.Payload) != 4 || binary.BigEndian.Uint32(g.Payload) != f.Rest {
			t.Fatalf("%+v: gopacket reads %v checksum %#x rest % x", f, g.TypeCode, g.Checksum, g.Payload)
		}
	}
}

// TestEncodeAllocs: the encoders run on the packet path (TCP resets, ICMP
// errors) and must not allocate.
func TestEncodeAllocs(t *testing.T) {
	b := make([]byte, 64)
	var (
		v4  IPv4Fields
		v6  IPv6Fields
		tcp TCPFields
		eth EthernetFields
		ic  ICMPFields
	)
	if n := testing.AllocsPerRun(100, func() {
		IPv4(b).Encode(&v4)
		IPv6(b).Encode(&v6)
		TCP(b).Encode(&tcp)
		Ethernet(b).Encode(&eth)
		ICMPv4(b).Encode(&ic)
		ICMPv6(b).Encode(&ic)
	}); n != 0 {
		t.Fatalf("Encode allocates %v times", n)
	}
}
