package gateway

// The parser as of commit 2bb272e, kept only to test the current one
// against (TestDecodeMatchesReference, FuzzDecodeMatchesReference): the
// current one was reshaped for speed (fixed-size views, values passed in
// registers, fewer stores) and must decode every frame the same way.

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// validFields returns the fields of p that its documentation says are
// valid, the others zero: two decoders agree when these agree.
func validFields(p *Parsed) Parsed {
	v := Parsed{Kind: p.Kind, HasVLAN: p.HasVLAN}
	if p.HasVLAN {
		v.VLAN = p.VLAN
	}
	if p.Kind == KindMalformed {
		v.Bad = p.Bad
	}
	if p.Kind < KindIP {
		return v
	}
	v.OuterL3 = p.OuterL3
	if p.Kind == KindTunnel {
		v.OuterVer, v.OuterSrc, v.OuterDst, v.OuterSrcPort = p.OuterVer, p.OuterSrc, p.OuterDst, p.OuterSrcPort
		v.Tunnel, v.VNI, v.InnerEth = p.Tunnel, p.VNI, p.InnerEth
	}
	v.L3, v.L4, v.End, v.IPVer, v.Proto, v.TTL, v.Src, v.Dst = p.L3, p.L4, p.End, p.IPVer, p.Proto, p.TTL, p.Src, p.Dst
	v.Frag, v.HasL4, v.ICMPEcho, v.ICMPErr = p.Frag, p.HasL4, p.ICMPEcho, p.ICMPErr
	if p.Frag {
		v.FragOff, v.MoreFrags, v.FragID = p.FragOff, p.MoreFrags, p.FragID
	}
	if p.HasL4 {
		switch p.Proto {
		case protoTCP:
			v.SrcPort, v.DstPort, v.TCPFlags = p.SrcPort, p.DstPort, p.TCPFlags
		case protoUDP:
			v.SrcPort, v.DstPort = p.SrcPort, p.DstPort
		case protoICMP, protoICMPv6:
			v.ICMPType, v.ICMPCode = p.ICMPType, p.ICMPCode
		}
	}
	if p.ICMPEcho {
		v.ICMPID = p.ICMPID
	}
	if p.ICMPErr {
		v.EmbL3, v.EmbL4, v.EmbProto, v.EmbSrc, v.EmbDst = p.EmbL3, p.EmbL4, p.EmbProto, p.EmbSrc, p.EmbDst
		v.EmbSrcPort, v.EmbDstPort, v.EmbEcho = p.EmbSrcPort, p.EmbDstPort, p.EmbEcho
	}
	return v
}

// checkDecode decodes b with both parsers, each into a Parsed left dirty by
// the previous frame (as a worker's is), and compares the valid fields.
func checkDecode(t *testing.T, got, want *Parsed, b []byte) {
	t.Helper()
	got.Decode(b)
	refDecode(want, b)
	if g, w := validFields(got), validFields(want); g != w {
		t.Fatalf("frame % x\ndecoded   %+v\nreference %+v", b, g, w)
	}
}

// TestDecodeMatchesReference runs the seed frames and 200k random
// mutations of them (byte changes aimed at the headers, truncations, VLAN
// tags) through both parsers, from a fixed seed.
func TestDecodeMatchesReference(t *testing.T) {
	var got, want Parsed
	seeds := seedFrames(t)
	for _, f := range seeds {
		checkDecode(t, &got, &want, f)
		checkDecode(t, &got, &want, withVLAN(f, false))
		checkDecode(t, &got, &want, withVLAN(f, true))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 0, 2048)
	for i := 0; i < 200000; i++ {
		f := seeds[rng.IntN(len(seeds))]
		if rng.IntN(4) == 0 {
			f = withVLAN(f, rng.IntN(2) == 0)
		}
		b := append(buf[:0], f...)
		for n := 1 + rng.IntN(3); n > 0; n-- {
			// Mostly header bytes: where the decisions are.
			b[rng.IntN(min(len(b), 160))] = byte(rng.Uint32())
		}
		if rng.IntN(3) == 0 {
			b = b[:rng.IntN(len(b)+1)]
		}
		checkDecode(t, &got, &want, b)
	}
}

// withVLAN puts an 802.1Q tag (and an 802.1ad one before it if qinq) after
// the MAC addresses of f.
func withVLAN(f []byte, qinq bool) []byte {
	b := append([]byte(nil), f[:12]...)
	if qinq {
		b = append(b, 0x88, 0xa8, 0x00, 0x64)
	}
	b = append(b, 0x81, 0x00, 0x20, 0x07)
	return append(b, f[12:]...)
}

func FuzzDecodeMatchesReference(f *testing.F) {
	for _, fr := range seedFrames(f) {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got, want Parsed
		checkDecode(t, &got, &want, b)
	})
}

// refDecode is Decode as it was before the established-path work. It
// parses frame (starting with an Ethernet header) into p. It never fails: a
// frame it cannot use becomes KindOther or KindMalformed.
func refDecode(p *Parsed, frame []byte) {
	p.Kind = KindOther
	p.Bad = DropNone
	p.HasVLAN = false
	p.Tunnel = TunnelNone
	if len(frame) < ethLen {
		p.bad(DropMalformed)
		return
	}
	off := 12
	et := binary.BigEndian.Uint16(frame[off:])
	if et == etherTypeQinQ || et == etherTypeVLAN {
		if et == etherTypeQinQ {
			// 802.1ad service tag: skip it, the customer tag (if any) follows.
			off += vlanLen
			if len(frame) < off+2+vlanLen {
				p.bad(DropMalformed)
				return
			}
			et = binary.BigEndian.Uint16(frame[off:])
		}
		if et == etherTypeVLAN {
			if len(frame) < off+2+vlanLen {
				p.bad(DropMalformed)
				return
			}
			p.HasVLAN = true
			p.VLAN = binary.BigEndian.Uint16(frame[off+2:])
			off += vlanLen
			et = binary.BigEndian.Uint16(frame[off:])
		}
	}
	l3 := off + 2
	if et != etherTypeIPv4 && et != etherTypeIPv6 {
		return
	}
	p.OuterL3 = l3
	if !refDecodeIP(p, frame, l3, et) {
		return
	}
	p.Kind = KindIP
	refDecodeL4(p, frame)
	if p.Proto == protoUDP && p.HasL4 && !p.Frag && (p.DstPort == vxlanPort || p.DstPort == genevePort) {
		refDecodeTunnel(p, frame)
	}
}

// refDecodeTunnel reads VXLAN/Geneve and the inner packet. On entry the outer IP
// and UDP header are in p's routed-packet fields.
func refDecodeTunnel(p *Parsed, b []byte) {
	p.OuterVer = p.IPVer
	p.OuterSrc = p.Src
	p.OuterDst = p.Dst
	p.OuterSrcPort = p.SrcPort
	udpEnd := p.End
	if ul := int(binary.BigEndian.Uint16(b[p.L4+4:])); ul < udpLen || p.L4+ul > p.End {
		p.bad(DropMalformed)
		return
	} else {
		udpEnd = p.L4 + ul
	}
	t := p.L4 + udpLen
	var eth int
	if p.DstPort == vxlanPort {
		if t+vxlanLen > udpEnd {
			p.bad(DropMalformed)
			return
		}
		if b[t]&0x08 == 0 {
			p.bad(DropBadTunnel)
			return
		}
		p.Tunnel = TunnelVXLAN
		p.VNI = uint32(b[t+4])<<16 | uint32(b[t+5])<<8 | uint32(b[t+6])
		eth = t + vxlanLen
	} else {
		if t+geneveLen > udpEnd {
			p.bad(DropMalformed)
			return
		}
		if b[t]>>6 != 0 || b[t+1]&0x80 != 0 || binary.BigEndian.Uint16(b[t+2:]) != etherTypeTEB {
			// Unknown version, OAM frame, or a payload other than Ethernet.
			p.bad(DropBadTunnel)
			return
		}
		hl := geneveLen + int(b[t]&0x3f)*4
		if t+hl > udpEnd {
			p.bad(DropMalformed)
			return
		}
		if b[t+1]&0x40 != 0 {
			// RFC 8926 §3.5: a critical option we do not understand means drop.
			p.bad(DropGeneveCritical)
			return
		}
		p.Tunnel = TunnelGeneve
		p.VNI = uint32(b[t+4])<<16 | uint32(b[t+5])<<8 | uint32(b[t+6])
		eth = t + hl
	}
	if eth+ethLen > udpEnd {
		p.bad(DropMalformed)
		return
	}
	p.InnerEth = eth
	et := binary.BigEndian.Uint16(b[eth+12:])
	if et != etherTypeIPv4 && et != etherTypeIPv6 {
		p.bad(DropUnsupportedProto)
		return
	}
	if !refDecodeIP(p, b[:udpEnd], eth+ethLen, et) {
		if p.Kind != KindMalformed {
			p.bad(DropMalformed)
		}
		return
	}
	p.Kind = KindTunnel
	refDecodeL4(p, b)
}

// refDecodeIP fills the routed-packet IP fields from the header at off. It
// returns false (with p marked malformed) if the header is invalid.
func refDecodeIP(p *Parsed, b []byte, off int, et uint16) bool {
	p.L3 = off
	p.Frag = false
	p.HasL4 = false
	p.ICMPEcho = false
	p.ICMPErr = false
	p.EmbEcho = false
	if et == etherTypeIPv4 {
		if len(b) < off+ipv4MinLen || b[off]>>4 != 4 {
			p.bad(DropMalformed)
			return false
		}
		hl := int(b[off]&0x0f) * 4
		tl := int(binary.BigEndian.Uint16(b[off+2:]))
		if hl < ipv4MinLen || tl < hl || off+tl > len(b) {
			p.bad(DropMalformed)
			return false
		}
		p.IPVer = 4
		p.End = off + tl
		p.L4 = off + hl
		p.Proto = b[off+9]
		p.TTL = b[off+8]
		refSetMapped(&p.Src, b[off+12:off+16])
		refSetMapped(&p.Dst, b[off+16:off+20])
		ff := binary.BigEndian.Uint16(b[off+6:])
		p.FragOff = ff & 0x1fff
		p.MoreFrags = ff&0x2000 != 0
		if p.FragOff != 0 || p.MoreFrags {
			p.Frag = true
			p.FragID = uint32(binary.BigEndian.Uint16(b[off+4:]))
		}
		return true
	}
	if len(b) < off+ipv6Len || b[off]>>4 != 6 {
		p.bad(DropMalformed)
		return false
	}
	pl := int(binary.BigEndian.Uint16(b[off+4:]))
	if off+ipv6Len+pl > len(b) {
		p.bad(DropMalformed)
		return false
	}
	p.IPVer = 6
	p.End = off + ipv6Len + pl
	p.TTL = b[off+7]
	copy(p.Src[:], b[off+8:off+24])
	copy(p.Dst[:], b[off+24:off+40])
	nh, l4, ok := refWalkIPv6(b[:p.End], off, p)
	if !ok {
		p.bad(DropMalformed)
		return false
	}
	p.Proto = nh
	p.L4 = l4
	return true
}

// refWalkIPv6 follows the extension-header chain of the IPv6 header at off
// within b and returns the final protocol and its offset. A fragment header
// sets frag info in p when p is not nil.
func refWalkIPv6(b []byte, off int, p *Parsed) (uint8, int, bool) {
	nh := b[off+6]
	cur := off + ipv6Len
	for i := 0; i < maxExtHeaders; i++ {
		switch nh {
		case protoHopByHop, protoRouting, protoDestOpts:
			if cur+8 > len(b) {
				return 0, 0, false
			}
			l := (int(b[cur+1]) + 1) * 8
			if cur+l > len(b) {
				return 0, 0, false
			}
			nh = b[cur]
			cur += l
		case protoFragment:
			if cur+8 > len(b) {
				return 0, 0, false
			}
			if p != nil {
				fo := binary.BigEndian.Uint16(b[cur+2:])
				p.Frag = true
				p.FragOff = fo >> 3
				p.MoreFrags = fo&1 != 0
				p.FragID = binary.BigEndian.Uint32(b[cur+4:])
			}
			nh = b[cur]
			cur += 8
		default:
			return nh, cur, true
		}
	}
	return 0, 0, false
}

// refDecodeL4 reads the transport header of the routed packet.
func refDecodeL4(p *Parsed, b []byte) {
	if p.Frag && p.FragOff != 0 {
		return
	}
	l4, end := p.L4, p.End
	switch p.Proto {
	case protoTCP:
		if l4+tcpMinLen > end {
			return
		}
		if doff := int(b[l4+12]>>4) * 4; doff < tcpMinLen || l4+doff > end {
			return
		}
		p.SrcPort = binary.BigEndian.Uint16(b[l4:])
		p.DstPort = binary.BigEndian.Uint16(b[l4+2:])
		p.TCPFlags = b[l4+13]
		p.HasL4 = true
	case protoUDP:
		if l4+udpLen > end {
			return
		}
		p.SrcPort = binary.BigEndian.Uint16(b[l4:])
		p.DstPort = binary.BigEndian.Uint16(b[l4+2:])
		p.HasL4 = true
	case protoICMP, protoICMPv6:
		if l4+icmpLen > end || (p.Proto == protoICMP) != (p.IPVer == 4) {
			return
		}
		p.ICMPType = b[l4]
		p.ICMPCode = b[l4+1]
		p.HasL4 = true
		if p.IPVer == 4 {
			switch p.ICMPType {
			case icmp4Echo, icmp4EchoReply:
				p.ICMPEcho = true
				p.ICMPID = binary.BigEndian.Uint16(b[l4+4:])
			case icmp4Unreach, icmp4TimeExc, icmp4ParamProb:
				refDecodeEmbedded(p, b, l4+icmpLen, end)
			}
		} else {
			switch p.ICMPType {
			case icmp6Echo, icmp6EchoReply:
				p.ICMPEcho = true
				p.ICMPID = binary.BigEndian.Uint16(b[l4+4:])
			case icmp6Unreach, icmp6TooBig, icmp6TimeExc, icmp6ParamProb:
				refDecodeEmbedded(p, b, l4+icmpLen, end)
			}
		}
	}
}

// refDecodeEmbedded reads the packet quoted in an ICMP error. The quoted packet
// is usually truncated, so its length fields are not checked against end.
func refDecodeEmbedded(p *Parsed, b []byte, off, end int) {
	b = b[:end]
	var l4 int
	if p.IPVer == 4 {
		if off+ipv4MinLen > end || b[off]>>4 != 4 {
			return
		}
		hl := int(b[off]&0x0f) * 4
		if hl < ipv4MinLen || off+hl > end {
			return
		}
		if binary.BigEndian.Uint16(b[off+6:])&0x1fff != 0 {
			return // a later fragment carries no ports
		}
		p.EmbProto = b[off+9]
		refSetMapped(&p.EmbSrc, b[off+12:off+16])
		refSetMapped(&p.EmbDst, b[off+16:off+20])
		l4 = off + hl
	} else {
		if off+ipv6Len > end || b[off]>>4 != 6 {
			return
		}
		nh, x, ok := refWalkIPv6(b, off, nil)
		if !ok {
			return
		}
		for c, n := off+ipv6Len, b[off+6]; c < x; {
			if n == protoFragment && binary.BigEndian.Uint16(b[c+2:])>>3 != 0 {
				return
			}
			if n == protoFragment {
				n, c = b[c], c+8
			} else {
				n, c = b[c], c+(int(b[c+1])+1)*8
			}
		}
		p.EmbProto = nh
		copy(p.EmbSrc[:], b[off+8:off+24])
		copy(p.EmbDst[:], b[off+24:off+40])
		l4 = x
	}
	if l4+8 > end {
		return
	}
	switch p.EmbProto {
	case protoTCP, protoUDP:
		p.EmbSrcPort = binary.BigEndian.Uint16(b[l4:])
		p.EmbDstPort = binary.BigEndian.Uint16(b[l4+2:])
	case protoICMP, protoICMPv6:
		if (p.EmbProto == protoICMP) != (p.IPVer == 4) {
			return
		}
		t := b[l4]
		if (p.IPVer == 4 && t != icmp4Echo) || (p.IPVer == 6 && t != icmp6Echo) {
			return // only queries are translated; errors about errors are not
		}
		p.EmbEcho = true
		p.EmbSrcPort = binary.BigEndian.Uint16(b[l4+4:])
		p.EmbDstPort = 0
	default:
		return
	}
	p.EmbL3 = off
	p.EmbL4 = l4
	p.ICMPErr = true
}

// refSetMapped stores the IPv4 address b[:4] into a as ::ffff:a.b.c.d with
// three word stores (building a [16]byte value and copying it is slower).
func refSetMapped(a *[16]byte, b []byte) {
	binary.LittleEndian.PutUint64(a[0:8], 0)
	binary.BigEndian.PutUint32(a[8:12], 0xffff)
	copy(a[12:16], b[:4])
}
