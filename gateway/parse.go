package gateway

import "encoding/binary"

// Kind is what Decode made of a frame.
type Kind uint8

const (
	// KindOther is a frame that is not IP (ARP, LLDP, ...): the kernel's business.
	KindOther Kind = iota
	// KindMalformed is a frame whose headers are truncated or invalid, or
	// that uses something the gateway does not support; Parsed.Bad says why.
	KindMalformed
	// KindIP is a plain IPv4 or IPv6 packet (a candidate reply from outside).
	KindIP
	// KindTunnel is VXLAN or Geneve over UDP with a decoded inner IP packet.
	KindTunnel
)

// Tunnel is an encapsulation type.
type Tunnel uint8

const (
	// TunnelNone means no tunnel.
	TunnelNone Tunnel = iota
	// TunnelVXLAN is VXLAN (RFC 7348) on UDP port 4789.
	TunnelVXLAN
	// TunnelGeneve is Geneve (RFC 8926) on UDP port 6081.
	TunnelGeneve
)

// Wire constants the parser needs. They mirror gateway/header's names so the
// two read alike.
const (
	ethLen         = 14
	vlanLen        = 4
	ipv4MinLen     = 20
	ipv6Len        = 40
	udpLen         = 8
	tcpMinLen      = 20
	icmpLen        = 8
	vxlanLen       = 8
	geneveLen      = 8
	etherTypeIPv4  = 0x0800
	etherTypeIPv6  = 0x86dd
	etherTypeVLAN  = 0x8100
	etherTypeQinQ  = 0x88a8
	etherTypeTEB   = 0x6558 // Geneve payload: transparent Ethernet bridging
	vxlanPort      = 4789
	genevePort     = 6081
	protoICMP      = 1
	protoTCP       = 6
	protoUDP       = 17
	protoICMPv6    = 58
	protoHopByHop  = 0
	protoRouting   = 43
	protoFragment  = 44
	protoDestOpts  = 60
	maxExtHeaders  = 8
	icmp4EchoReply = 0
	icmp4Unreach   = 3
	icmp4Echo      = 8
	icmp4TimeExc   = 11
	icmp4ParamProb = 12
	icmp6Unreach   = 1
	icmp6TooBig    = 2
	icmp6TimeExc   = 3
	icmp6ParamProb = 4
	icmp6Echo      = 128
	icmp6EchoReply = 129
)

// Parsed is one decoded frame. Decode fills it without allocating; a Parsed
// is reused for every frame a worker sees. Each field says when it is valid.
type Parsed struct {
	// Kind is always valid.
	Kind Kind
	// Bad is the drop reason; valid iff Kind == KindMalformed.
	Bad DropReason

	// VLAN is the 802.1Q tag control (PCP, DEI, VID); valid iff HasVLAN.
	VLAN    uint16
	HasVLAN bool

	// OuterL3 is the offset of the outermost IP header; valid iff Kind >= KindIP.
	OuterL3 int
	// OuterVer is the outer IP version (4 or 6); valid iff Kind == KindTunnel.
	OuterVer uint8
	// OuterSrc and OuterDst are the tunnel endpoints (IPv4-mapped for IPv4);
	// valid iff Kind == KindTunnel.
	OuterSrc, OuterDst [16]byte
	// OuterSrcPort is the outer UDP source port; valid iff Kind == KindTunnel.
	OuterSrcPort uint16
	// Tunnel and VNI identify the encapsulation; valid iff Kind == KindTunnel.
	Tunnel Tunnel
	VNI    uint32
	// InnerEth is the offset of the inner Ethernet header; valid iff Kind == KindTunnel.
	InnerEth int

	// The routed IP packet: the inner one for KindTunnel, the only one for
	// KindIP. All fields below are valid iff Kind >= KindIP unless they say more.

	// L3 is the offset of the IP header, L4 of the transport header (after
	// IPv6 extension headers), End one past the last byte of the IP packet
	// (bytes after it are link padding).
	L3, L4, End int
	// IPVer is 4 or 6.
	IPVer uint8
	// Proto is the transport protocol (after IPv6 extension headers).
	Proto uint8
	// TTL is the IPv4 TTL or IPv6 hop limit.
	TTL uint8
	// Src and Dst are the addresses, IPv4-mapped for IPv4.
	Src, Dst [16]byte
	// Frag is true for any fragment (IPv4 MF or offset, or an IPv6 fragment header).
	Frag bool
	// FragOff is the fragment offset in 8-byte units, MoreFrags the MF flag and
	// FragID the identification; valid iff Frag.
	FragOff   uint16
	MoreFrags bool
	FragID    uint32
	// HasL4 is true when the transport header is present and long enough:
	// not a later fragment, and TCP/UDP/ICMP with its minimum header.
	HasL4 bool
	// SrcPort and DstPort are valid iff HasL4 and Proto is TCP or UDP.
	SrcPort, DstPort uint16
	// TCPFlags is the flags byte; valid iff HasL4 and Proto == TCP.
	TCPFlags uint8
	// ICMPType and ICMPCode are valid iff HasL4 and Proto is ICMP or ICMPv6.
	ICMPType, ICMPCode uint8
	// ICMPEcho is true for echo request/reply; ICMPID is then the identifier.
	ICMPEcho bool
	ICMPID   uint16
	// ICMPErr is true for an ICMP error (unreachable, packet too big, time
	// exceeded, parameter problem) whose embedded packet decoded: its IP
	// header and at least 8 bytes of its transport header are present. The
	// Emb fields are valid iff ICMPErr.
	ICMPErr bool
	// EmbL3 and EmbL4 are the offsets of the embedded IP and transport headers.
	EmbL3, EmbL4 int
	// EmbProto is the embedded packet's transport protocol.
	EmbProto uint8
	// EmbSrc and EmbDst are the embedded packet's addresses.
	EmbSrc, EmbDst [16]byte
	// EmbSrcPort and EmbDstPort are its ports; for an embedded echo request
	// EmbSrcPort is the identifier and EmbDstPort 0 (conntrack's ICMP tuple).
	EmbSrcPort, EmbDstPort uint16
	// EmbEcho is true when the embedded packet is an ICMP echo request.
	EmbEcho bool
}

func (p *Parsed) bad(r DropReason) {
	p.Kind = KindMalformed
	p.Bad = r
}

// Decode parses frame (starting with an Ethernet header) into p. It never
// fails: a frame it cannot use becomes KindOther or KindMalformed.
func (p *Parsed) Decode(frame []byte) {
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
	l4, end, ok := p.decodeIP(frame, l3, et)
	if !ok {
		return
	}
	p.Kind = KindIP
	if p.Proto == protoUDP && !p.Frag && l4+udpLen <= end && end <= len(frame) {
		u := (*[udpLen]byte)(frame[l4 : l4+udpLen])
		if dport := binary.BigEndian.Uint16(u[2:4]); dport == vxlanPort || dport == genevePort {
			p.decodeTunnel(frame, l4, end, binary.BigEndian.Uint16(u[0:2]), dport, int(binary.BigEndian.Uint16(u[4:6])))
			return
		}
	}
	p.decodeL4(frame, l4, end)
}

// decodeTunnel reads VXLAN/Geneve and the inner packet. On entry the outer IP
// header is in p's routed-packet fields; its UDP header at l4 (the IP packet
// ends at end) has ports sport and dport and length ul.
func (p *Parsed) decodeTunnel(b []byte, l4, end int, sport, dport uint16, ul int) {
	p.OuterVer = p.IPVer
	copy16(&p.OuterSrc, &p.Src)
	copy16(&p.OuterDst, &p.Dst)
	p.OuterSrcPort = sport
	// The tunnel header is read through one fixed-size view (VXLAN and
	// Geneve without options are both 8 bytes): no bounds checks per field.
	if ul < udpLen || l4+ul > end {
		p.bad(DropMalformed)
		return
	}
	udpEnd := l4 + ul
	t := l4 + udpLen
	if t+vxlanLen > udpEnd || udpEnd > len(b) {
		p.bad(DropMalformed)
		return
	}
	h := (*[vxlanLen]byte)(b[t : t+vxlanLen])
	var eth int
	if dport == vxlanPort {
		if h[0]&0x08 == 0 {
			p.bad(DropBadTunnel)
			return
		}
		p.Tunnel = TunnelVXLAN
		eth = t + vxlanLen
	} else {
		if h[0]>>6 != 0 || h[1]&0x80 != 0 || binary.BigEndian.Uint16(h[2:4]) != etherTypeTEB {
			// Unknown version, OAM frame, or a payload other than Ethernet.
			p.bad(DropBadTunnel)
			return
		}
		hl := geneveLen + int(h[0]&0x3f)*4
		if t+hl > udpEnd {
			p.bad(DropMalformed)
			return
		}
		if h[1]&0x40 != 0 {
			// RFC 8926 §3.5: a critical option we do not understand means drop.
			p.bad(DropGeneveCritical)
			return
		}
		p.Tunnel = TunnelGeneve
		eth = t + hl
	}
	p.VNI = uint32(h[4])<<16 | uint32(h[5])<<8 | uint32(h[6])
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
	l4, end, ok := p.decodeIP(b[:udpEnd], eth+ethLen, et)
	if !ok {
		return
	}
	p.Kind = KindTunnel
	p.decodeL4(b, l4, end)
}

// decodeIP fills the routed-packet IP fields from the header at off and
// returns L4 and End (also in p) for the caller to go on without reloading
// them. ok is false (with p marked malformed) if the header is invalid.
func (p *Parsed) decodeIP(b []byte, off int, et uint16) (l4, end int, ok bool) {
	p.L3 = off
	p.Frag = false
	p.HasL4 = false
	p.ICMPEcho = false
	p.ICMPErr = false
	p.EmbEcho = false
	if et == etherTypeIPv4 {
		if off < 0 || len(b) < off+ipv4MinLen {
			p.bad(DropMalformed)
			return 0, 0, false
		}
		h := (*[ipv4MinLen]byte)(b[off : off+ipv4MinLen]) // one bounds check for the fields below
		hl := int(h[0]&0x0f) * 4
		tl := int(binary.BigEndian.Uint16(h[2:4]))
		if h[0]>>4 != 4 || hl < ipv4MinLen || tl < hl || off+tl > len(b) {
			p.bad(DropMalformed)
			return 0, 0, false
		}
		end, l4 = off+tl, off+hl
		p.IPVer = 4
		p.End = end
		p.L4 = l4
		p.Proto = h[9]
		p.TTL = h[8]
		setMapped(&p.Src, (*[4]byte)(h[12:16]))
		setMapped(&p.Dst, (*[4]byte)(h[16:20]))
		ff := binary.BigEndian.Uint16(h[6:8])
		p.FragOff = ff & 0x1fff
		p.MoreFrags = ff&0x2000 != 0
		if ff&0x3fff != 0 {
			p.Frag = true
			p.FragID = uint32(binary.BigEndian.Uint16(h[4:6]))
		}
		return l4, end, true
	}
	if off < 0 || len(b) < off+ipv6Len {
		p.bad(DropMalformed)
		return 0, 0, false
	}
	h := (*[ipv6Len]byte)(b[off : off+ipv6Len])
	end = off + ipv6Len + int(binary.BigEndian.Uint16(h[4:6]))
	if h[0]>>4 != 6 || end > len(b) {
		p.bad(DropMalformed)
		return 0, 0, false
	}
	p.IPVer = 6
	p.End = end
	p.TTL = h[7]
	p.Src = [16]byte(h[8:24])
	p.Dst = [16]byte(h[24:40])
	nh, l4, ok := walkIPv6(b[:end], off, p)
	if !ok {
		p.bad(DropMalformed)
		return 0, 0, false
	}
	p.Proto = nh
	p.L4 = l4
	return l4, end, true
}

// walkIPv6 follows the extension-header chain of the IPv6 header at off
// within b and returns the final protocol and its offset. A fragment header
// sets frag info in p when p is not nil.
func walkIPv6(b []byte, off int, p *Parsed) (uint8, int, bool) {
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

// decodeL4 reads the transport header at l4 of the routed packet, which
// ends at end.
func (p *Parsed) decodeL4(b []byte, l4, end int) {
	if p.Frag && p.FragOff != 0 {
		return
	}
	switch p.Proto {
	case protoTCP:
		if l4+tcpMinLen > end || end > len(b) {
			return
		}
		h := (*[tcpMinLen]byte)(b[l4 : l4+tcpMinLen])
		if doff := int(h[12]>>4) * 4; doff < tcpMinLen || l4+doff > end {
			return
		}
		p.SrcPort = binary.BigEndian.Uint16(h[0:2])
		p.DstPort = binary.BigEndian.Uint16(h[2:4])
		p.TCPFlags = h[13]
		p.HasL4 = true
	case protoUDP:
		if l4+udpLen > end || end > len(b) {
			return
		}
		h := (*[udpLen]byte)(b[l4 : l4+udpLen])
		p.SrcPort = binary.BigEndian.Uint16(h[0:2])
		p.DstPort = binary.BigEndian.Uint16(h[2:4])
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
				p.decodeEmbedded(b, l4+icmpLen, end)
			}
		} else {
			switch p.ICMPType {
			case icmp6Echo, icmp6EchoReply:
				p.ICMPEcho = true
				p.ICMPID = binary.BigEndian.Uint16(b[l4+4:])
			case icmp6Unreach, icmp6TooBig, icmp6TimeExc, icmp6ParamProb:
				p.decodeEmbedded(b, l4+icmpLen, end)
			}
		}
	}
}

// decodeEmbedded reads the packet quoted in an ICMP error. The quoted packet
// is usually truncated, so its length fields are not checked against end.
func (p *Parsed) decodeEmbedded(b []byte, off, end int) {
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
		setMapped(&p.EmbSrc, (*[4]byte)(b[off+12:off+16]))
		setMapped(&p.EmbDst, (*[4]byte)(b[off+16:off+20]))
		l4 = off + hl
	} else {
		if off+ipv6Len > end || b[off]>>4 != 6 {
			return
		}
		nh, x, ok := walkIPv6(b, off, nil)
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

// setMapped stores the IPv4 address b into a as ::ffff:a.b.c.d with two
// 8-byte stores, so that the 8-byte loads that hash and compare addresses
// right after are forwarded from a single store each (a load spanning two
// stores waits for them to reach the cache).
func setMapped(a *[16]byte, b *[4]byte) {
	binary.LittleEndian.PutUint64(a[0:8], 0)
	binary.LittleEndian.PutUint64(a[8:16], 0xffff_0000|uint64(binary.LittleEndian.Uint32(b[:]))<<32)
}

// copy16 copies an address as two 8-byte words, for the same reason.
func copy16(dst, src *[16]byte) {
	binary.LittleEndian.PutUint64(dst[0:8], binary.LittleEndian.Uint64(src[0:8]))
	binary.LittleEndian.PutUint64(dst[8:16], binary.LittleEndian.Uint64(src[8:16]))
}
