package gateway

import (
	"encoding/binary"
	"testing"

	"github.com/egret-gw/egret/gateway/header"
)

// TestTunnelChecksum6 pins how the outer UDP checksum of tunnel packets is
// taken, as a Linux VXLAN device with its defaults takes it: over IPv6 a
// correct checksum is accepted and a zero (RFC 6935/6936: only where both
// ends agree, which Linux devices do not by default) or wrong one is a
// counted drop; over IPv4 zero means "no checksum" and is accepted.
// (encap_ref_test checks the checksum of what the gateway encapsulates.)
func TestTunnelChecksum6(t *testing.T) {
	tun6 := tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelVXLAN, vni: testVNI}
	const udp6 = 14 + 40 // outer UDP header of an untagged IPv6 tunnel frame
	cases := []struct {
		name string
		tu   tun
		edit func(f []byte)
		want DropReason // DropNone: sent
	}{
		{"ipv6 correct", tun6, func([]byte) {}, DropNone},
		{"ipv6 zero", tun6, func(f []byte) { binary.BigEndian.PutUint16(f[udp6+6:], 0) }, DropTunnelChecksum},
		{"ipv6 wrong", tun6, func(f []byte) { f[udp6+6] ^= 0x10 }, DropTunnelChecksum},
		{"ipv6 payload bit flipped", tun6, func(f []byte) { f[len(f)-1] ^= 1 }, DropTunnelChecksum},
		{"ipv6 0xffff for a sum of 0", tun6, nil, DropNone},
		{"ipv4 zero", podTun(), func(f []byte) { binary.BigEndian.PutUint16(f[14+20+6:], 0) }, DropNone},
	}
	f := newFixture(t, 1024, testConfig())
	out := make([]byte, 2048)
	for _, c := range cases {
		src := pod1v4
		if c.tu.outerSrc.Is6() {
			src = pod2v4
		}
		p := udpFrom(src, server4)
		fr := tunnelFrame(t, c.tu, p.build(t))
		if c.edit == nil {
			// A datagram whose sum is 0 is sent with 0xffff (RFC 768): add
			// the checksum to an even-aligned payload word, so the sum of
			// the datagram becomes 0xffff, and store 0xffff. (The inner
			// checksum no longer matches; the gateway does not check it.)
			binary.BigEndian.PutUint16(fr[udp6+6:], 0)
			u := fr[udp6:]
			ps := header.PseudoHeaderChecksum(header.ProtoUDP, fr[14+8:14+24], fr[14+24:14+40], uint16(len(u)))
			cs := header.ChecksumFold(header.Checksum(u, ps))
			w := len(u) - 2 - len(u)%2
			s := uint32(binary.BigEndian.Uint16(u[w:])) + uint32(cs)
			binary.BigEndian.PutUint16(u[w:], uint16(s+s>>16))
			if header.ChecksumFold(header.Checksum(u, ps)) != 0 {
				t.Fatal("the datagram's sum is not 0xffff")
			}
			binary.BigEndian.PutUint16(u[6:], 0xffff)
		}
		if c.edit != nil {
			c.edit(fr)
		}
		r := processOne(f.w, testNow, fr, out)
		switch {
		case c.want == DropNone && r.Verdict != VerdictTx:
			t.Errorf("%s: %v/%v, want sent", c.name, r.Verdict, r.Reason)
		case c.want != DropNone && (r.Verdict != VerdictDrop || r.Reason != c.want):
			t.Errorf("%s: %v/%v, want drop/%v", c.name, r.Verdict, r.Reason, c.want)
		}
	}
}

// BenchmarkTunnelChecksum6 is the cost of checking the outer UDP checksum
// of a full-sized tunnel frame over IPv6 (1500-byte IPv6 packet: a
// 1460-byte datagram).
func BenchmarkTunnelChecksum6(b *testing.B) {
	p := udpFrom(pod2v4, server4)
	p.payload = make([]byte, 1500-40-8-8-14-20-8)
	fr := tunnelFrame(b, tun{outerSrc: node2VTEP, outerDst: gwVTEP6, kind: TunnelVXLAN, vni: testVNI}, p.build(b))
	var src, dst [16]byte
	copy(src[:], fr[14+8:14+24])
	copy(dst[:], fr[14+24:14+40])
	b.SetBytes(int64(len(fr) - 14 - 40))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if !tunnelChecksum6(fr, 14+40, len(fr), &src, &dst) {
			b.Fatal("checksum does not verify")
		}
	}
}
