package header

import (
	"encoding/binary"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// TestIPv4SourceRoutedAgainstGopacket builds random option lists (well
// formed or not, from a fixed seed) and checks SourceRouted against
// gopacket's option decoding: where gopacket decodes the header, ok is
// true and routed says whether an LSRR or SSRR precedes the end of the
// list; where SourceRouted says malformed, gopacket refuses the header
// too. (gopacket also refuses length-2 options, which Linux and
// SourceRouted accept, so that direction is not compared.)
func TestIPv4SourceRoutedAgainstGopacket(t *testing.T) {
	r := newRand()
	types := []uint8{v4OptEnd, v4OptNOP, 0x07, 0x44, 0x94, v4OptLSRR, v4OptSSRR, 0x83 ^ 0x80, 0x89 ^ 0x80}
	counts := map[string]int{}
	for i := 0; i < 20000; i++ {
		var opts []byte
		for len(opts) < 40 && r.IntN(4) != 0 {
			ty := types[r.IntN(len(types))]
			if ty <= v4OptNOP {
				opts = append(opts, ty)
				continue
			}
			n := 3 + 4*r.IntN(3)
			if r.IntN(8) == 0 {
				n = r.IntN(45) // sometimes too short or past the header
			}
			o := append([]byte{ty, uint8(n)}, randBytes(r, max(n-2, 0))...)
			opts = append(opts, o...)
		}
		if r.IntN(8) == 0 && len(opts) > 0 {
			opts = opts[:r.IntN(len(opts))] // cut inside an option
		}
		if len(opts) > 40 {
			opts = opts[:40]
		}
		for len(opts)%4 != 0 {
			opts = append(opts, v4OptEnd)
		}
		hl := IPv4MinLen + len(opts)
		b := make([]byte, hl+8)
		IPv4(b).Encode(&IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: ProtoUDP, SrcAddr: [4]byte{192, 0, 2, 1}, DstAddr: [4]byte{198, 51, 100, 1}})
		IPv4(b).SetHeaderLength(hl)
		copy(b[IPv4MinLen:], opts)
		binary.BigEndian.PutUint16(b[hl+4:], 8)
		routed, ok := IPv4(b).SourceRouted()

		p := gopacket.NewPacket(b, layers.LayerTypeIPv4, noCopy)
		ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if p.ErrorLayer() != nil || ip == nil {
			counts["gopacket refused"]++
			if !ok {
				counts["malformed"]++
			}
			continue
		}
		want := false
		for _, o := range ip.Options {
			if o.OptionType == v4OptLSRR || o.OptionType == v4OptSSRR {
				want = true
			}
		}
		if !ok || routed != want {
			t.Fatalf("options % x: routed %v ok %v, gopacket %v", opts, routed, ok, ip.Options)
		}
		if routed {
			counts["routed"]++
		} else {
			counts["not routed"]++
		}
	}
	for _, k := range []string{"routed", "not routed", "malformed"} {
		if counts[k] < 500 {
			t.Fatalf("too few cases %q: %v", k, counts)
		}
	}
}

// SourceRouted allocates nothing.
func TestIPv4SourceRoutedAllocs(t *testing.T) {
	b := make([]byte, 28)
	IPv4(b).Encode(&IPv4Fields{TotalLength: 28})
	IPv4(b).SetHeaderLength(28)
	copy(b[20:], []byte{v4OptNOP, v4OptLSRR, 7, 4, 10, 0, 0, 1})
	if n := testing.AllocsPerRun(100, func() {
		if r, ok := IPv4(b).SourceRouted(); !r || !ok {
			t.Fatal("LSRR not seen")
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
