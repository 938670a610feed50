package header

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// chainSpec describes an IPv6 packet built by buildChain.
type chainSpec struct {
	exts    []uint8 // extension header types, in order
	final   uint8   // TCP, UDP, ICMPv6, ESP or No Next Header
	fragOff uint16  // fragment offset in bytes when a Fragment header is present
	more    bool    // M flag of the Fragment header
}

// buildChain writes an IPv6 packet with the given extension headers, each in
// a shape gopacket decodes (PadN-filled options, type 0 routing, 12+ byte
// AH), followed by a well-formed final header.
func buildChain(r *rand.Rand, s chainSpec) []byte {
	b := make([]byte, IPv6Len, 512)
	ip := IPv6(b)
	ip.SetVersionTrafficClassFlowLabel(0, 1)
	ip.SetHopLimit(64)
	ip.SetSrcAddr([16]byte(randBytes(r, 16)))
	ip.SetDstAddr([16]byte(randBytes(r, 16)))
	types := append(append([]uint8(nil), s.exts...), s.final)
	ip.SetNextHeader(types[0])
	for i, t := range s.exts {
		next := types[i+1]
		switch t {
		case ProtoHopByHop, ProtoDestOpts:
			k := r.IntN(3)
			h := make([]byte, (k+1)*8)
			h[0], h[1], h[2], h[3] = next, uint8(k), 1, uint8(len(h)-4) // PadN
			b = append(b, h...)
		case ProtoRouting:
			k := 2 * r.IntN(2)
			h := make([]byte, (k+1)*8)
			h[0], h[1] = next, uint8(k) // type 0
			if r.IntN(2) == 0 {
				h[3] = uint8(1 + r.IntN(255)) // segments left: source routed
			}
			copy(h[8:], randBytes(r, len(h)-8))
			b = append(b, h...)
		case ProtoFragment:
			h := make([]byte, 8)
			h[0] = next
			fo := s.fragOff &^ 7
			if s.more {
				fo |= 1
			}
			binary.BigEndian.PutUint16(h[2:], fo)
			binary.BigEndian.PutUint32(h[4:], r.Uint32())
			b = append(b, h...)
		case ProtoAH:
			p := 1 + 2*r.IntN(2)
			h := randBytes(r, (p+2)*4)
			h[0], h[1], h[2], h[3] = next, uint8(p), 0, 0
			b = append(b, h...)
		}
	}
	switch s.final {
	case ProtoTCP:
		h := make([]byte, TCPMinLen+r.IntN(30))
		h[12] = TCPMinLen / 4 << 4 // data offset
		b = append(b, h...)
	case ProtoUDP:
		h := make([]byte, UDPLen+r.IntN(30))
		UDP(h).SetLength(uint16(len(h)))
		b = append(b, h...)
	case ProtoICMPv6:
		h := make([]byte, ICMPv6MinLen+r.IntN(30))
		h[0] = ICMPv6EchoRequest
		b = append(b, h...)
	default:
		b = append(b, randBytes(r, 8+r.IntN(30))...)
	}
	IPv6(b).SetPayloadLength(uint16(len(b) - IPv6Len))
	return b
}

func isExtLayer(l gopacket.Layer) (next uint8, ok bool) {
	switch x := l.(type) {
	case *layers.IPv6HopByHop:
		return uint8(x.NextHeader), true
	case *layers.IPv6Routing:
		return uint8(x.NextHeader), true
	case *layers.IPv6Destination:
		return uint8(x.NextHeader), true
	case *layers.IPv6Fragment:
		return uint8(x.NextHeader), true
	case *layers.IPSecAH:
		return uint8(x.NextHeader), true
	}
	return 0, false
}

func TestIPv6ExtWalkAgainstGopacket(t *testing.T) {
	r := newRand()
	finals := []uint8{ProtoTCP, ProtoUDP, ProtoICMPv6, ProtoESP, ProtoNoNextHeader}
	middle := []uint8{ProtoDestOpts, ProtoRouting, ProtoAH}
	for i := 0; i < 1000; i++ {
		var s chainSpec
		if r.IntN(3) == 0 {
			s.exts = append(s.exts, ProtoHopByHop)
		}
		for n := r.IntN(4); n > 0; n-- {
			s.exts = append(s.exts, middle[r.IntN(len(middle))])
		}
		// gopacket stops at any Fragment header, so it goes last.
		if r.IntN(2) == 0 {
			s.exts = append(s.exts, ProtoFragment)
			s.more = r.IntN(2) == 0
			if r.IntN(2) == 0 {
				s.fragOff = uint16(1+r.IntN(1000)) * 8
			}
		}
		s.final = finals[r.IntN(len(finals))]
		data := buildChain(r, s)

		// The oracle: where gopacket's last extension header ends, or
		// where its first AH starts (the walk ends there).
		p := gopacket.NewPacket(data, layers.LayerTypeIPv6, noCopy)
		wantProto, wantOff := uint8(IPv6(data).NextHeader()), IPv6Len
		var gfrag *layers.IPv6Fragment
		nExt, atAH, routed := 0, false, false
		for _, l := range p.Layers() {
			next, ok := isExtLayer(l)
			if !ok {
				continue
			}
			nExt++
			if atAH {
				continue
			}
			if rt, ok := l.(*layers.IPv6Routing); ok && rt.SegmentsLeft != 0 {
				routed = true
			}
			if _, ah := l.(*layers.IPSecAH); ah {
				wantProto, wantOff, atAH = ProtoAH, offsetOf(data, l), true
				continue
			}
			wantProto, wantOff = next, offsetOf(data, l)+len(l.LayerContents())
			if f, ok := l.(*layers.IPv6Fragment); ok {
				gfrag = f
			}
		}
		if nExt != len(s.exts) {
			t.Fatalf("gopacket saw %d of %d extension headers: %v", nExt, len(s.exts), p)
		}
		b := IPv6(data)
		if !ipv6Valid(data) {
			t.Fatal("built packet invalid")
		}
		x := b.WalkExtensionsStopAtAH()
		if x.Status != IPv6ExtOK || x.Proto != wantProto || x.Offset != wantOff {
			t.Fatalf("chain %v → %d: walk = %+v, gopacket proto %d offset %d", s.exts, s.final, x, wantProto, wantOff)
		}
		if x.SourceRouted != routed {
			t.Fatalf("chain %v: source routed %v, gopacket %v", s.exts, x.SourceRouted, routed)
		}
		if (gfrag != nil) != x.Fragment {
			t.Fatalf("fragment seen %v, gopacket %v", x.Fragment, gfrag != nil)
		}
		if gfrag != nil && (x.FragOffset != gfrag.FragmentOffset*8 || x.MoreFragments != gfrag.MoreFragments ||
			x.FragID != gfrag.Identification || x.NonFirstFragment() != (gfrag.FragmentOffset != 0)) {
			t.Fatalf("fragment fields %+v, gopacket %+v", x, gfrag)
		}
		// Cutting the packet anywhere inside the chain is a truncation;
		// cutting after it still finds the final header.
		for n := IPv6Len; n <= len(data); n++ {
			y := IPv6(data[:n]).WalkExtensionsStopAtAH()
			if n < wantOff && y.Status != IPv6ExtTruncated {
				t.Fatalf("cut at %d of chain ending %d: %+v", n, wantOff, y)
			}
			if n >= wantOff && (y.Status != IPv6ExtOK || y.Offset != wantOff) {
				t.Fatalf("cut at %d after chain ending %d: %+v", n, wantOff, y)
			}
		}
	}
}

func TestIPv6ExtWalkRejects(t *testing.T) {
	r := newRand()
	// IPv6MaxExtHeaders Destination Options headers are walked; one more is
	// refused.
	many := make([]uint8, IPv6MaxExtHeaders)
	for i := range many {
		many[i] = ProtoDestOpts
	}
	x := IPv6(buildChain(r, chainSpec{exts: many, final: ProtoUDP})).WalkExtensionsStopAtAH()
	if x.Status != IPv6ExtOK || x.Proto != ProtoUDP {
		t.Fatalf("%d headers: %+v", len(many), x)
	}
	x = IPv6(buildChain(r, chainSpec{exts: append(many, ProtoDestOpts), final: ProtoUDP})).WalkExtensionsStopAtAH()
	if x.Status != IPv6ExtTooMany {
		t.Fatalf("%d headers: %+v", len(many)+1, x)
	}
	// A chain that names itself over and over ends at the bound, not in a
	// loop, even with a huge payload length.
	loop := make([]byte, IPv6Len+8*200)
	IPv6(loop).SetVersionTrafficClassFlowLabel(0, 0)
	IPv6(loop).SetNextHeader(ProtoRouting)
	IPv6(loop).SetPayloadLength(0xffff)
	for off := IPv6Len; off < len(loop); off += 8 {
		loop[off] = ProtoRouting
	}
	if x := IPv6(loop).WalkExtensionsStopAtAH(); x.Status != IPv6ExtTooMany {
		t.Fatalf("self-referencing chain: %+v", x)
	}
	// Hop-by-Hop anywhere but first.
	x = IPv6(buildChain(r, chainSpec{exts: []uint8{ProtoDestOpts, ProtoHopByHop}, final: ProtoTCP})).WalkExtensionsStopAtAH()
	if x.Status != IPv6ExtBadHopByHop {
		t.Fatalf("late Hop-by-Hop: %+v", x)
	}
	// The payload length, not the slice, bounds the walk.
	d := buildChain(r, chainSpec{exts: []uint8{ProtoRouting}, final: ProtoUDP})
	IPv6(d).SetPayloadLength(7)
	if x := IPv6(d).WalkExtensionsStopAtAH(); x.Status != IPv6ExtTruncated {
		t.Fatalf("chain beyond payload length: %+v", x)
	}
	// ESP and No Next Header end the walk where they start.
	for _, p := range []uint8{ProtoESP, ProtoNoNextHeader} {
		d := buildChain(r, chainSpec{exts: []uint8{ProtoDestOpts}, final: p})
		x := IPv6(d).WalkExtensionsStopAtAH()
		if x.Status != IPv6ExtOK || x.Proto != p || x.Offset != IPv6Len+(int(d[IPv6Len+1])+1)*8 {
			t.Fatalf("final %d: %+v", p, x)
		}
	}
	// A non-first fragment stops at the Fragment header even when what
	// follows looks like more extension headers.
	d = buildChain(r, chainSpec{exts: []uint8{ProtoFragment, ProtoDestOpts}, final: ProtoTCP, fragOff: 1448})
	x = IPv6(d).WalkExtensionsStopAtAH()
	if x.Status != IPv6ExtOK || !x.NonFirstFragment() || x.Proto != ProtoDestOpts || x.Offset != IPv6Len+8 || x.FragOffset != 1448 {
		t.Fatalf("non-first fragment: %+v", x)
	}
	// A first fragment is walked through to the L4 header.
	d = buildChain(r, chainSpec{exts: []uint8{ProtoFragment, ProtoDestOpts}, final: ProtoTCP, more: true})
	x = IPv6(d).WalkExtensionsStopAtAH()
	if x.Status != IPv6ExtOK || x.NonFirstFragment() || !x.Fragment || !x.MoreFragments || x.Proto != ProtoTCP {
		t.Fatalf("first fragment: %+v", x)
	}
}

// TestWalkStopAtAH: the walk ends where AH starts, whatever follows it.
func TestWalkStopAtAH(t *testing.T) {
	r := newRand()
	b := IPv6(buildChain(r, chainSpec{exts: []uint8{ProtoDestOpts, ProtoAH, ProtoRouting}, final: ProtoTCP}))
	x := b.WalkExtensionsStopAtAH()
	if want := IPv6Len + (int(b[IPv6Len+1])+1)*8; x.Status != IPv6ExtOK || x.Proto != ProtoAH || x.Offset != want {
		t.Fatalf("stop at AH: %+v, want offset %d", x, want)
	}
}
