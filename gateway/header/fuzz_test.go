package header

import (
	"bytes"
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// The seed corpora below run in plain `go test`; `go test -fuzz=FuzzX`
// explores further.

func FuzzIPv6Ext(f *testing.F) {
	r := newRand()
	for _, s := range []chainSpec{
		{final: ProtoTCP},
		{exts: []uint8{ProtoHopByHop, ProtoDestOpts, ProtoRouting, ProtoAH, ProtoFragment}, final: ProtoUDP},
		{exts: []uint8{ProtoFragment}, final: ProtoUDP, fragOff: 8},
		{exts: []uint8{ProtoDestOpts, ProtoHopByHop}, final: ProtoICMPv6},
		{exts: []uint8{ProtoRouting, ProtoRouting, ProtoRouting, ProtoRouting, ProtoRouting, ProtoRouting, ProtoRouting, ProtoRouting, ProtoRouting}, final: ProtoESP},
	} {
		d := buildChain(r, s)
		f.Add(d)
		f.Add(d[:len(d)-9])
	}
	f.Add(make([]byte, 40))
	f.Fuzz(func(t *testing.T, data []byte) {
		b := IPv6(data)
		if len(data) < IPv6Len {
			return
		}
		valid := ipv6Valid(data)
		x := b.WalkExtensionsStopAtAH()
		end := min(len(data), IPv6Len+int(b.PayloadLength()))
		if x.Status != IPv6ExtOK {
			return
		}
		if x.Offset < IPv6Len || x.Offset > end {
			t.Fatalf("offset %d outside [40, %d]", x.Offset, end)
		}
		switch x.Proto {
		case ProtoHopByHop, ProtoRouting, ProtoDestOpts, ProtoFragment:
			if !x.NonFirstFragment() {
				t.Fatalf("walk ended on extension header %d: %+v", x.Proto, x)
			}
		}
		if (x.Offset-IPv6Len)%4 != 0 {
			t.Fatalf("offset %d not on a 4-byte boundary", x.Offset)
		}
		// Walking a longer slice with the same payload length is the same
		// walk: the payload length bounds it, not the slice.
		if valid {
			y := IPv6(append(append([]byte(nil), data...), 0, 0, 0, 0, 0, 0, 0, 0)).WalkExtensionsStopAtAH()
			if y != x {
				t.Fatalf("trailing bytes changed the walk: %+v vs %+v", y, x)
			}
		}
	})
}

func FuzzGeneve(f *testing.F) {
	r := newRand()
	for _, w := range [][]int{nil, {0}, {1, 2, 3}, {31}, {15, 15}} {
		d := buildGeneve(r, 77, GeneveFlagC, w)
		f.Add(d)
		f.Add(d[:len(d)/2])
	}
	f.Add([]byte{0x01, 0, 0x65, 0x58, 0, 0, 1, 0, 0, 1, 0, 0x1f})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < GeneveMinLen {
			return
		}
		b := Geneve(data).Fixed()
		if b.Version() != data[0]>>6 {
			t.Fatalf("version %d of byte %#x", b.Version(), data[0])
		}
		if b.Version() != 0 {
			// gopacket reads one version bit only; the packet path drops
			// any version but 0 anyway.
			return
		}
		g, ok := decodeGeneve(data)
		if !ok {
			return
		}
		if b.Version() != g.Version || int(b.OptLen())*4 != int(g.OptionsLength) || b.OAM() != g.OAMPacket ||
			b.Critical() != g.CriticalOption || b.ProtocolType() != uint16(g.Protocol) || b.VNI() != g.VNI ||
			b.HeaderLength() != GeneveMinLen+int(g.OptionsLength) {
			t.Fatalf("fields differ from gopacket: %+v", g)
		}
	})
}

// decodeGeneve decodes data with gopacket, which panics on options that run
// past the packet (the packet path does not read options).
func decodeGeneve(data []byte) (g *layers.Geneve, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	g = &layers.Geneve{}
	return g, g.DecodeFromBytes(data, gopacket.NilDecodeFeedback) == nil
}

func FuzzIPv4(f *testing.F) {
	r := newRand()
	for i := 0; i < 4; i++ {
		d := serialize(f, randIPv4(r), gopacket.Payload(randBytes(r, 10)))
		f.Add(d)
		f.Add(d[:len(d)-1])
	}
	f.Add(make([]byte, 20))
	f.Add([]byte{0x4f, 0, 0, 60, 0, 0, 0, 0, 1, 6, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		b := IPv4(data)
		if !ipv4Valid(data) {
			return
		}
		hl, tl := b.HeaderLength(), int(b.TotalLength())
		g := &layers.IPv4{}
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			// gopacket also parses the options; we keep them as-is.
			if !bytes.Contains([]byte(err.Error()), []byte("option")) {
				t.Fatalf("a header valid for us is refused by gopacket: %v", err)
			}
			return
		}
		s, d := b.SrcAddr(), b.DstAddr()
		if b.HeaderLength() != int(g.IHL)*4 || b.TotalLength() != g.Length || b.ID() != g.Id || b.Flags() != uint8(g.Flags) ||
			b.FragmentOffset() != g.FragOffset*8 || b.TTL() != g.TTL || b.Protocol() != uint8(g.Protocol) ||
			!net.IP(s[:]).Equal(g.SrcIP) || !net.IP(d[:]).Equal(g.DstIP) || !bytes.Equal(data[hl:tl], g.Payload) {
			t.Fatalf("fields differ from gopacket: %+v", g)
		}
		// The computed checksum makes the header verify.
		c := b.CalculateChecksum()
		old := b.Checksum()
		b.SetChecksum(c)
		if !ipv4ChecksumOK(b) {
			t.Fatal("CalculateChecksum does not verify")
		}
		b.SetChecksum(old)
	})
}
