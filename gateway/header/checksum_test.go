package header

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// referenceSum is the slow byte-by-byte RFC 1071 sum the fast one is checked
// against: big-endian 16-bit words, odd byte padded with zero, end-around
// carry after every addition.
func referenceSum(buf []byte, initial uint32) uint16 {
	s := initial
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	for i := 0; i < len(buf); i += 2 {
		w := uint32(buf[i]) << 8
		if i+1 < len(buf) {
			w |= uint32(buf[i+1])
		}
		s += w
		if s > 0xffff {
			s = s>>16 + s&0xffff
		}
	}
	return uint16(s)
}

func referenceChecksum(buf []byte, initial uint32) uint16 { return ^referenceSum(buf, initial) }

func newRand() *rand.Rand { return rand.New(rand.NewPCG(0x6567726574, 1624)) }

func TestChecksumMatchesReference(t *testing.T) {
	r := newRand()
	buf := make([]byte, 4096)
	for i := 0; i < 3000; i++ {
		n := r.IntN(len(buf) + 1)
		b := buf[:n]
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		// Some all-ones and all-zero buffers: the carry-heavy corners.
		switch i % 10 {
		case 0:
			for j := range b {
				b[j] = 0xff
			}
		case 1:
			clear(b)
		}
		initial := r.Uint32()
		if i%3 == 0 {
			initial = 0
		}
		got := ChecksumFold(Checksum(b, initial))
		want := referenceChecksum(b, initial)
		if got != want {
			t.Fatalf("len %d initial %#x: Checksum = %#04x, reference = %#04x", n, initial, got, want)
		}
	}
}

func TestChecksumChains(t *testing.T) {
	r := newRand()
	buf := make([]byte, 1500)
	for j := range buf {
		buf[j] = byte(r.Uint32())
	}
	for i := 0; i < 500; i++ {
		split := r.IntN(len(buf)/2) * 2 // even split point
		whole := ChecksumFold(Checksum(buf, 0))
		chained := ChecksumFold(Checksum(buf[split:], Checksum(buf[:split], 0)))
		if whole != chained {
			t.Fatalf("split %d: chained %#04x != whole %#04x", split, chained, whole)
		}
	}
}

func TestChecksumKnownValue(t *testing.T) {
	// RFC 1071 §3 example: the sum of these bytes is 0xddf2.
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if s := Checksum(b, 0); s != 0xddf2 {
		t.Fatalf("RFC 1071 example sum = %#x, want 0xddf2", s)
	}
	if c := ChecksumFold(Checksum(b, 0)); c != ^uint16(0xddf2) {
		t.Fatalf("fold = %#x", c)
	}
	// A valid header sums to 0xffff, so its fold is 0.
	hdr := []byte{0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0, 1, 0xc0, 0xa8, 0, 0xc7}
	if c := ChecksumFold(Checksum(hdr, 0)); c != 0 {
		t.Fatalf("valid IPv4 header folds to %#x, want 0", c)
	}
}

func TestPseudoHeaderChecksum(t *testing.T) {
	r := newRand()
	for i := 0; i < 200; i++ {
		for _, alen := range []int{4, 16} {
			src, dst := make([]byte, alen), make([]byte, alen)
			for j := range src {
				src[j], dst[j] = byte(r.Uint32()), byte(r.Uint32())
			}
			proto, length := uint8(r.Uint32()), uint16(r.Uint32())
			// The pseudo-header as bytes: src, dst, zero, proto, length
			// (IPv4); src, dst, 32-bit length, 3 zero bytes, next header
			// (IPv6) — both sum to the same value.
			var ph []byte
			ph = append(ph, src...)
			ph = append(ph, dst...)
			if alen == 4 {
				ph = append(ph, 0, proto, byte(length>>8), byte(length))
			} else {
				ph = append(ph, 0, 0, byte(length>>8), byte(length), 0, 0, 0, proto)
			}
			if got, want := ChecksumFold(PseudoHeaderChecksum(proto, src, dst, length)), referenceChecksum(ph, 0); got != want {
				t.Fatalf("alen %d: pseudo %#x want %#x", alen, got, want)
			}
		}
	}
}

// equivalent reports whether two checksum fields are the same one's-
// complement number (0x0000 and 0xffff are both zero).
func equivalent(a, b uint16) bool {
	return a == b || (a == 0 && b == 0xffff) || (a == 0xffff && b == 0)
}

func TestChecksumUpdateAgainstRecompute(t *testing.T) {
	r := newRand()
	buf := make([]byte, 256)
	exact := 0
	for i := 0; i < 20000; i++ {
		n := 40 + 2*r.IntN(100)
		b := buf[:n]
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		check := ChecksumFold(Checksum(b, 0))
		var got uint16
		switch i % 4 {
		case 0: // a port or TTL/protocol word
			off := 2 * r.IntN(n/2)
			old := binary.BigEndian.Uint16(b[off:])
			nw := uint16(r.Uint32())
			if i%8 == 0 { // TTL decrement: only the high byte changes
				nw = old - 0x100
			}
			binary.BigEndian.PutUint16(b[off:], nw)
			got = ChecksumUpdate16(check, old, nw)
		case 1, 2, 3: // a 32-bit word, an IPv4 or an IPv6 address
			alen := 4
			if i%4 == 3 {
				alen = 16
			}
			off := 2 * r.IntN((n-alen)/2)
			var old, nw [16]byte
			copy(old[:], b[off:off+alen])
			for j := range alen {
				nw[j] = byte(r.Uint32())
			}
			copy(b[off:], nw[:alen])
			got = ChecksumUpdateAddr(check, old[:alen], nw[:alen])
		}
		want := ChecksumFold(Checksum(b, 0))
		if !equivalent(got, want) {
			t.Fatalf("case %d len %d: incremental %#04x, recomputed %#04x", i%4, n, got, want)
		}
		if got == want {
			exact++
		}
		// The updated checksum must verify the packet.
		if ChecksumFold(Checksum(b, uint32(got))) != 0 {
			t.Fatalf("case %d: updated checksum does not verify", i%4)
		}
	}
	if exact < 19990 {
		t.Fatalf("only %d of 20000 updates matched bit for bit", exact)
	}
}

func TestChecksumUpdateEdgeCases(t *testing.T) {
	// RFC 1624 §3: data whose sum is 0xffff except one word. Changing that
	// word to make the sum +0 must yield checksum 0x0000 (eqn 3 never
	// produces the 0xffff eqn 2 could), matching full recomputation.
	b := []byte{0xff, 0xfe, 0x00, 0x01}
	check := ChecksumFold(Checksum(b, 0))
	if check != 0 {
		t.Fatalf("setup: checksum %#x", check)
	}
	binary.BigEndian.PutUint16(b[2:], 0x0002)
	got := ChecksumUpdate16(check, 0x0001, 0x0002)
	if want := ChecksumFold(Checksum(b, 0)); got != want {
		t.Fatalf("got %#x want %#x", got, want)
	}
	// Changing a word from x to x leaves any checksum as it is.
	for _, c := range []uint16{0, 1, 0x8000, 0xfffe, 0xffff} {
		if got := ChecksumUpdate16(c, 0x1234, 0x1234); !equivalent(got, c) {
			t.Fatalf("identity update of %#x gave %#x", c, got)
		}
	}
	// Mismatched or odd address lengths leave the checksum unchanged.
	if got := ChecksumUpdateAddr(0x1234, []byte{1, 2, 3, 4}, []byte{1, 2}); got != 0x1234 {
		t.Fatalf("mismatched lengths changed checksum to %#x", got)
	}
	if got := ChecksumUpdateAddr(0x1234, []byte{1, 2, 3}, []byte{4, 5, 6}); got != 0x1234 {
		t.Fatalf("odd length changed checksum to %#x", got)
	}
	if UDPChecksumValue(0) != 0xffff || UDPChecksumValue(7) != 7 {
		t.Fatal("UDPChecksumValue must map only 0 to 0xffff")
	}
}

func TestChecksumAllocs(t *testing.T) {
	buf := make([]byte, 1500)
	src, dst := make([]byte, 16), make([]byte, 16)
	var sink uint16
	n := testing.AllocsPerRun(100, func() {
		s := Checksum(buf, PseudoHeaderChecksum(ProtoTCP, src, dst, 1500))
		sink += ChecksumFold(s)
		sink += ChecksumUpdate16(sink, 1, 2)
		sink += ChecksumUpdateAddr(sink, src, dst)
	})
	if n != 0 {
		t.Fatalf("checksum functions allocate %v times per run", n)
	}
	_ = sink
}

var benchSink uint16

func BenchmarkChecksum1500(b *testing.B) {
	buf := make([]byte, 1500)
	r := newRand()
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		benchSink += ChecksumFold(Checksum(buf, 0))
	}
}

func BenchmarkChecksumReference1500(b *testing.B) {
	buf := make([]byte, 1500)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		benchSink += referenceChecksum(buf, 0)
	}
}

func BenchmarkChecksumUpdate16(b *testing.B) {
	b.ReportAllocs()
	c := uint16(0x1234)
	for i := 0; b.Loop(); i++ {
		c = ChecksumUpdate16(c, uint16(i), uint16(i+1))
	}
	benchSink += c
}

func BenchmarkChecksumUpdateAddr16(b *testing.B) {
	old, nw := make([]byte, 16), make([]byte, 16)
	for i := range old {
		old[i], nw[i] = byte(i), byte(3*i)
	}
	b.ReportAllocs()
	c := uint16(0x1234)
	for b.Loop() {
		c = ChecksumUpdateAddr(c, old, nw)
	}
	benchSink += c
}

func BenchmarkIPv6WalkExtensions(b *testing.B) {
	d := buildChain(newRand(), chainSpec{exts: []uint8{ProtoHopByHop, ProtoDestOpts, ProtoFragment}, final: ProtoTCP})
	ip := IPv6(d)
	b.ReportAllocs()
	for b.Loop() {
		benchSink += uint16(ip.WalkExtensionsStopAtAH().Offset)
	}
}

// TestChecksumDeltaAgainstRecompute changes an address and a port (as a NAT
// rewrite does) and checks the checksum updated with one summed delta
// against a recomputation.
func TestChecksumDeltaAgainstRecompute(t *testing.T) {
	r := newRand()
	buf := make([]byte, 256)
	for i := 0; i < 20000; i++ {
		alen := 4
		if i%2 == 1 {
			alen = 16
		}
		n := 2*alen + 8 + 2*r.IntN(80)
		b := buf[:n]
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		check := ChecksumFold(Checksum(b, 0))
		// The address sits at a 4-byte boundary, the port after it.
		off := 4 * r.IntN((n-alen-2)/4)
		nw := make([]byte, alen)
		for j := range nw {
			nw[j] = byte(r.Uint32())
		}
		d := ChecksumDelta(b[off:off+alen], nw)
		if alen == 4 {
			if d2 := ChecksumDeltaIPv4([4]byte(b[off:off+4]), [4]byte(nw)); d2 != d {
				t.Fatalf("ChecksumDeltaIPv4 %#x, ChecksumDelta %#x", d2, d)
			}
		}
		copy(b[off:], nw)
		po := off + alen
		oldPort, newPort := binary.BigEndian.Uint16(b[po:]), uint16(r.Uint32())
		d += ChecksumDelta16(oldPort, newPort)
		binary.BigEndian.PutUint16(b[po:], newPort)
		got := ChecksumApplyDelta(check, d)
		if want := ChecksumFold(Checksum(b, 0)); !equivalent(got, want) {
			t.Fatalf("len %d addr %d: delta-updated %#04x, recomputed %#04x", n, alen, got, want)
		}
	}
}
