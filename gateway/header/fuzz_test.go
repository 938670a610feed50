package header

import (
	"bytes"
	"encoding/binary"
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
		valid := b.IsValid(len(data))
		if len(data) < IPv6Len {
			if valid {
				t.Fatal("short packet valid")
			}
			return
		}
		x := b.WalkExtensions()
		end := min(len(data), IPv6Len+int(b.PayloadLength()))
		if x.Status != IPv6ExtOK {
			return
		}
		if x.Offset < IPv6Len || x.Offset > end {
			t.Fatalf("offset %d outside [40, %d]", x.Offset, end)
		}
		switch x.Proto {
		case ProtoHopByHop, ProtoRouting, ProtoDestOpts, ProtoAH, ProtoFragment:
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
			y := IPv6(append(append([]byte(nil), data...), 0, 0, 0, 0, 0, 0, 0, 0)).WalkExtensions()
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
		b := Geneve(data)
		hl, st := b.Validate(len(data))
		if st != GeneveOK {
			return
		}
		if hl != b.HeaderLength() || hl > len(data) || b.Version() != 0 {
			t.Fatalf("header length %d, %d bytes, version %d", hl, len(data), b.Version())
		}
		var classes []uint16
		var datas [][]byte
		short := true // every option is under 16 words: gopacket can read it
		for off := GeneveMinLen; off < hl; {
			next, ok := b.NextOption(off, hl)
			if !ok || next <= off || next > hl {
				t.Fatalf("validated options do not walk: at %d next %d ok %v", off, next, ok)
			}
			class, _, od := b.Option(off)
			if len(od) != next-off-GeneveOptionHeaderLen {
				t.Fatalf("option data %d bytes, option spans %d", len(od), next-off)
			}
			if data[off+3]&0xf0 != 0 {
				short = false
			}
			classes, datas = append(classes, class), append(datas, od)
			off = next
		}
		if !short {
			return
		}
		g := &layers.Geneve{}
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			t.Fatalf("Validate accepted what gopacket refuses: %v", err)
		}
		if len(g.Options) != len(classes) || b.VNI() != g.VNI || int(b.OptLen())*4 != int(g.OptionsLength) {
			t.Fatalf("gopacket sees %d options, we %d", len(g.Options), len(classes))
		}
		for i, o := range g.Options {
			if o.Class != classes[i] || !bytes.Equal(o.Data, datas[i]) {
				t.Fatalf("option %d: %+v vs class %#x data %x", i, o, classes[i], datas[i])
			}
		}
	})
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
		if !b.IsValid(len(data)) {
			return
		}
		hl, tl := b.HeaderLength(), int(b.TotalLength())
		if hl < IPv4MinLen || hl > tl || tl > len(data) || len(b.Options()) != hl-IPv4MinLen || len(b.Payload()) != tl-hl {
			t.Fatalf("valid header with hl %d tl %d len %d", hl, tl, len(data))
		}
		g := &layers.IPv4{}
		if err := g.DecodeFromBytes(data, gopacket.NilDecodeFeedback); err != nil {
			// gopacket also parses the options; we keep them as-is.
			if !bytes.Contains([]byte(err.Error()), []byte("option")) {
				t.Fatalf("IsValid accepted what gopacket refuses: %v", err)
			}
			return
		}
		s, d := b.SrcAddr(), b.DstAddr()
		if b.IHL() != g.IHL || b.TotalLength() != g.Length || b.ID() != g.Id || b.Flags() != uint8(g.Flags) ||
			b.FragmentOffset() != g.FragOffset*8 || b.TTL() != g.TTL || b.Protocol() != uint8(g.Protocol) ||
			!net.IP(s[:]).Equal(g.SrcIP) || !net.IP(d[:]).Equal(g.DstIP) || !bytes.Equal(b.Payload(), g.Payload) {
			t.Fatalf("fields differ from gopacket: %+v", g)
		}
		// The computed checksum makes the header verify.
		c := b.CalculateChecksum()
		old := b.Checksum()
		b.SetChecksum(c)
		if !b.ChecksumValid() {
			t.Fatal("CalculateChecksum does not verify")
		}
		b.SetChecksum(old)
	})
}

func FuzzEthernet(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x81, 0, 0, 5, 0x08, 0})
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x88, 0xa8, 0, 5, 0x81, 0, 0, 6, 0x86, 0xdd})
	f.Add(make([]byte, 14))
	f.Fuzz(func(t *testing.T, data []byte) {
		et, off, ok := Ethernet(data).PayloadOffset()
		_ = Ethernet(data).VLANID()
		if !ok {
			return
		}
		if off > len(data) || IsVLAN(et) || off < EthernetLen || (off-EthernetLen)%VLANLen != 0 ||
			binary.BigEndian.Uint16(data[off-2:]) != et {
			t.Fatalf("offset %d ethertype %#x for %d bytes", off, et, len(data))
		}
	})
}

func FuzzL4(f *testing.F) {
	f.Add([]byte{0, 53, 0, 53, 0, 8, 0, 0})
	f.Add([]byte{0, 80, 1, 187, 0, 0, 0, 1, 0, 0, 0, 2, 0x50, 0x12, 0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if u := UDP(data); u.IsValid(len(data)) {
			if len(u.Payload()) != int(u.Length())-UDPLen {
				t.Fatal("UDP payload length")
			}
			c := u.CalculateChecksum(0)
			if c == 0 {
				t.Fatal("computed UDP checksum 0 must be sent as 0xffff")
			}
		}
		if tc := TCP(data); tc.IsValid(len(data)) {
			if len(tc.Options()) != tc.DataOffset()-TCPMinLen {
				t.Fatal("TCP options length")
			}
			_ = tc.CalculateChecksum(0)
		}
	})
}
