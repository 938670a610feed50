package gateway

import (
	"encoding/binary"

	"github.com/egret-gw/egret/gateway/header"
)

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

// Parsed is one decoded frame. Decode fills it without allocating; a Parsed
// is reused for every frame a processor sees. Each field says when it is valid.
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
	// TCPFlags is the flags byte; TCPSeq and TCPAck the sequence and
	// acknowledgment numbers, TCPLen the payload bytes; valid iff HasL4 and
	// Proto == TCP.
	TCPFlags       uint8
	TCPLen         uint16
	TCPSeq, TCPAck uint32
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
//
// Every header is read through its gateway/header view, validated once
// and then cut to its fixed part (Fixed), whose accessors need no bounds
// checks.
func (p *Parsed) Decode(frame []byte) {
	p.Kind = KindOther
	p.Bad = DropNone
	p.HasVLAN = false
	p.Tunnel = TunnelNone
	if len(frame) < header.EthernetLen {
		p.bad(DropMalformed)
		return
	}
	off := header.EthernetLen - 2 // the EtherType, or the first tag's TPID
	et := header.Ethernet(frame).Fixed().EtherType()
	// The tags are read here rather than through header.Ethernet: the
	// gateway keeps the whole TCI of the 802.1Q customer tag behind an
	// 802.1ad one.
	// A tag is a TPID and a TCI, 2 bytes each; off is at a TPID.
	if et == header.EtherTypeQinQ || et == header.EtherTypeVLAN {
		if et == header.EtherTypeQinQ {
			// 802.1ad service tag: skip it, the customer tag (if any) follows.
			off += header.VLANLen
			if len(frame) < off+2+header.VLANLen {
				p.bad(DropMalformed)
				return
			}
			et = binary.BigEndian.Uint16(frame[off:])
		}
		if et == header.EtherTypeVLAN {
			if len(frame) < off+2+header.VLANLen {
				p.bad(DropMalformed)
				return
			}
			p.HasVLAN = true
			p.VLAN = binary.BigEndian.Uint16(frame[off+2:])
			off += header.VLANLen
			et = binary.BigEndian.Uint16(frame[off:])
		}
	}
	l3 := off + 2
	if et != header.EtherTypeIPv4 && et != header.EtherTypeIPv6 {
		return
	}
	p.OuterL3 = l3
	l4, end, ok := p.decodeIP(frame, l3, et)
	if !ok {
		return
	}
	p.Kind = KindIP
	if p.Proto == header.ProtoUDP && !p.Frag && l4+header.UDPLen <= end && end <= len(frame) {
		u := header.UDP(frame[l4 : l4+header.UDPLen]).Fixed()
		if dport := u.DstPort(); dport == header.VXLANPort || dport == header.GenevePort {
			p.decodeTunnel(frame, l4, end, u.SrcPort(), dport, int(u.Length()))
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
	if ul < header.UDPLen || l4+ul > end {
		p.bad(DropMalformed)
		return
	}
	udpEnd := l4 + ul
	if p.OuterVer == 6 && !tunnelChecksum6(b, l4, udpEnd, &p.OuterSrc, &p.OuterDst) {
		p.bad(DropTunnelChecksum)
		return
	}
	t := l4 + header.UDPLen
	// VXLAN and Geneve without options are both 8 bytes.
	if t+header.VXLANLen > udpEnd || udpEnd > len(b) {
		p.bad(DropMalformed)
		return
	}
	var eth int
	if dport == header.VXLANPort {
		h := header.VXLAN(b[t : t+header.VXLANLen]).Fixed()
		if h.Flags()&header.VXLANFlagI == 0 {
			p.bad(DropBadTunnel)
			return
		}
		p.Tunnel = TunnelVXLAN
		p.VNI = h.VNI()
		eth = t + header.VXLANLen
	} else {
		h := header.Geneve(b[t : t+header.GeneveMinLen]).Fixed()
		if h.Version() != 0 || h.OAM() || h.ProtocolType() != header.EtherTypeTEB {
			// Unknown version, OAM frame, or a payload other than Ethernet.
			p.bad(DropBadTunnel)
			return
		}
		hl := h.HeaderLength()
		if t+hl > udpEnd {
			p.bad(DropMalformed)
			return
		}
		if h.Critical() {
			// RFC 8926 §3.5: a critical option we do not understand means drop.
			p.bad(DropGeneveCritical)
			return
		}
		p.Tunnel = TunnelGeneve
		p.VNI = h.VNI()
		eth = t + hl
	}
	if eth+header.EthernetLen > udpEnd {
		p.bad(DropMalformed)
		return
	}
	p.InnerEth = eth
	et := header.Ethernet(b[eth : eth+header.EthernetLen]).Fixed().EtherType()
	if et != header.EtherTypeIPv4 && et != header.EtherTypeIPv6 {
		p.bad(DropUnsupportedProto)
		return
	}
	l4, end, ok := p.decodeIP(b[:udpEnd], eth+header.EthernetLen, et)
	if !ok {
		return
	}
	p.Kind = KindTunnel
	p.decodeL4(b, l4, end)
}

// tunnelChecksum6 checks the outer UDP checksum of a tunnel packet over
// IPv6 (UDP header at l4, datagram ending at end), as the kernel's VXLAN
// and Geneve sockets do by default: a zero checksum is refused (RFC 6935
// and 6936 allow it only where both ends are configured for it, and Linux
// devices are not unless udp6zerocsumrx is set), a wrong one is corruption.
func tunnelChecksum6(b []byte, l4, end int, src, dst *[16]byte) bool {
	if b[l4+6] == 0 && b[l4+7] == 0 {
		return false
	}
	ps := header.PseudoHeaderChecksum(header.ProtoUDP, src[:], dst[:], uint16(end-l4))
	return header.ChecksumFold(header.Checksum(b[l4:end], ps)) == 0
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
	if et == header.EtherTypeIPv4 {
		if off < 0 || len(b) < off+header.IPv4MinLen {
			p.bad(DropMalformed)
			return 0, 0, false
		}
		h := header.IPv4(b[off : off+header.IPv4MinLen]).Fixed()
		hl, tl := h.HeaderLength(), int(h.TotalLength())
		if h.Version() != header.IPv4Version || hl < header.IPv4MinLen || tl < hl || off+tl > len(b) {
			p.bad(DropMalformed)
			return 0, 0, false
		}
		end, l4 = off+tl, off+hl
		p.IPVer = 4
		p.End = end
		p.L4 = l4
		p.Proto = h.Protocol()
		p.TTL = h.TTL()
		src := h.SrcAddr()
		// 0/8 (this network), 127/8 (loopback), 224/4 (multicast) and 240/4
		// (reserved, limited broadcast) are never the source of a packet on
		// the wire (RFC 1122 §3.2.1.3, RFC 6890), and Linux drops them as
		// martians; the XDP program only sends unicast to a VTEP or an
		// egress IP here, so DHCP's 0.0.0.0 never arrives.
		if b0 := src[0]; b0 == 0 || b0 == 127 || b0 >= 224 {
			p.bad(DropBadAddress)
			return 0, 0, false
		}
		if hl > header.IPv4MinLen {
			// A source route makes the destination only the first hop:
			// a pod could reach a denied address through an allowed
			// one. Linux drops these unless accept_source_route is set.
			if routed, ok := header.IPv4(b[off : off+hl]).SourceRouted(); !ok {
				p.bad(DropMalformed)
				return 0, 0, false
			} else if routed {
				p.bad(DropSourceRoute)
				return 0, 0, false
			}
		}
		setMapped(&p.Src, src)
		setMapped(&p.Dst, h.DstAddr())
		p.FragOff = h.FragmentOffset() >> 3
		p.MoreFrags = h.MoreFragments()
		if h.IsFragment() {
			p.Frag = true
			p.FragID = uint32(h.ID())
		}
		return l4, end, true
	}
	if off < 0 || len(b) < off+header.IPv6Len {
		p.bad(DropMalformed)
		return 0, 0, false
	}
	h := header.IPv6(b[off : off+header.IPv6Len]).Fixed()
	end = off + header.IPv6Len + int(h.PayloadLength())
	if h.Version() != header.IPv6Version || end > len(b) {
		p.bad(DropMalformed)
		return 0, 0, false
	}
	p.IPVer = 6
	p.End = end
	p.TTL = h.HopLimit()
	p.Src = h.SrcAddr()
	p.Dst = h.DstAddr()
	// Addresses are kept IPv4-mapped, so an IPv6 header carrying
	// ::ffff:a.b.c.d would pass for IPv4 a.b.c.d (anti-spoofing, the
	// flow table, hosted egress IPs). ::/80 holds it, IPv4-compatible
	// ::/96, :: and ::1, none of which is valid in an IPv6 header on the
	// wire (RFC 4291 §2.5.5, RFC 6890); a multicast source never is.
	if in80(&p.Src) || in80(&p.Dst) || p.Src[0] == 0xff {
		p.bad(DropBadAddress)
		return 0, 0, false
	}
	nh, l4 := h.NextHeader(), off+header.IPv6Len
	if header.IsIPv6Extension(nh) {
		x := header.IPv6(b[off:end]).WalkExtensionsStopAtAH()
		if x.Status != header.IPv6ExtOK {
			p.bad(DropMalformed)
			return 0, 0, false
		}
		if x.SourceRouted {
			// As for IPv4 source routes: the destination is only the
			// next segment (Linux drops type 0 always, and SRv6 unless
			// seg6_enabled).
			p.bad(DropSourceRoute)
			return 0, 0, false
		}
		if x.Fragment {
			p.Frag = true
			p.FragOff = x.FragOffset >> 3
			p.MoreFrags = x.MoreFragments
			p.FragID = x.FragID
		}
		nh, l4 = x.Proto, off+x.Offset
	}
	p.Proto = nh
	p.L4 = l4
	return l4, end, true
}

// decodeL4 reads the transport header at l4 of the routed packet, which
// ends at end.
func (p *Parsed) decodeL4(b []byte, l4, end int) {
	if p.Frag && p.FragOff != 0 {
		return
	}
	switch p.Proto {
	case header.ProtoTCP:
		if l4+header.TCPMinLen > end || end > len(b) {
			return
		}
		h := header.TCP(b[l4 : l4+header.TCPMinLen]).Fixed()
		if doff := h.DataOffset(); doff < header.TCPMinLen || l4+doff > end {
			return
		}
		p.SrcPort = h.SrcPort()
		p.DstPort = h.DstPort()
		p.TCPFlags = h.Flags()
		p.TCPSeq, p.TCPAck = h.Seq(), h.Ack()
		p.TCPLen = uint16(end - l4 - h.DataOffset())
		p.HasL4 = true
	case header.ProtoUDP:
		if l4+header.UDPLen > end || end > len(b) {
			return
		}
		h := header.UDP(b[l4 : l4+header.UDPLen]).Fixed()
		p.SrcPort = h.SrcPort()
		p.DstPort = h.DstPort()
		p.HasL4 = true
	case header.ProtoICMPv4:
		if l4+header.ICMPv4MinLen > end || p.IPVer != 4 {
			return
		}
		h := header.ICMPv4(b[l4 : l4+header.ICMPv4MinLen]).Fixed()
		p.ICMPType, p.ICMPCode = h.Type(), h.Code()
		p.HasL4 = true
		switch p.ICMPType {
		case header.ICMPv4EchoRequest, header.ICMPv4EchoReply:
			p.ICMPEcho = true
			p.ICMPID = h.Ident()
		case header.ICMPv4DstUnreachable, header.ICMPv4TimeExceeded, header.ICMPv4ParamProblem:
			p.decodeEmbedded(b, l4+header.ICMPv4MinLen, end)
		}
	case header.ProtoICMPv6:
		if l4+header.ICMPv6MinLen > end || p.IPVer != 6 {
			return
		}
		h := header.ICMPv6(b[l4 : l4+header.ICMPv6MinLen]).Fixed()
		p.ICMPType, p.ICMPCode = h.Type(), h.Code()
		p.HasL4 = true
		switch p.ICMPType {
		case header.ICMPv6EchoRequest, header.ICMPv6EchoReply:
			p.ICMPEcho = true
			p.ICMPID = h.Ident()
		case header.ICMPv6DstUnreachable, header.ICMPv6PacketTooBig, header.ICMPv6TimeExceeded, header.ICMPv6ParamProblem:
			p.decodeEmbedded(b, l4+header.ICMPv6MinLen, end)
		}
	}
}

// decodeEmbedded reads the packet quoted in an ICMP error. The quoted packet
// is usually truncated, so its length fields are not checked against end.
func (p *Parsed) decodeEmbedded(b []byte, off, end int) {
	b = b[:end]
	var l4 int
	if p.IPVer == 4 {
		if off+header.IPv4MinLen > end {
			return
		}
		h := header.IPv4(b[off : off+header.IPv4MinLen]).Fixed()
		hl := h.HeaderLength()
		if h.Version() != header.IPv4Version || hl < header.IPv4MinLen || off+hl > end {
			return
		}
		if h.FragmentOffset() != 0 {
			return // a later fragment carries no ports
		}
		p.EmbProto = h.Protocol()
		setMapped(&p.EmbSrc, h.SrcAddr())
		setMapped(&p.EmbDst, h.DstAddr())
		l4 = off + hl
	} else {
		if off+header.IPv6Len > end {
			return
		}
		h := header.IPv6(b[off:])
		if h.Version() != header.IPv6Version {
			return
		}
		x := h.WalkExtensionsStopAtAH()
		if x.Status != header.IPv6ExtOK || x.NonFirstFragment() {
			return // a later fragment carries no ports
		}
		p.EmbProto = x.Proto
		p.EmbSrc = h.SrcAddr()
		p.EmbDst = h.DstAddr()
		l4 = off + x.Offset
	}
	if l4+8 > end {
		return
	}
	switch p.EmbProto {
	case header.ProtoTCP, header.ProtoUDP:
		// Only the ports, which the quote's first 8 bytes hold for both.
		h := header.UDP(b[l4 : l4+header.UDPLen]).Fixed()
		p.EmbSrcPort = h.SrcPort()
		p.EmbDstPort = h.DstPort()
	case header.ProtoICMPv4:
		if p.IPVer != 4 || header.ICMPv4(b[l4:l4+header.ICMPv4MinLen]).Fixed().Type() != header.ICMPv4EchoRequest {
			return // only queries are translated; errors about errors are not
		}
		p.EmbEcho = true
		p.EmbSrcPort = header.ICMPv4(b[l4 : l4+header.ICMPv4MinLen]).Fixed().Ident()
		p.EmbDstPort = 0
	case header.ProtoICMPv6:
		if p.IPVer != 6 || header.ICMPv6(b[l4:l4+header.ICMPv6MinLen]).Fixed().Type() != header.ICMPv6EchoRequest {
			return
		}
		p.EmbEcho = true
		p.EmbSrcPort = header.ICMPv6(b[l4 : l4+header.ICMPv6MinLen]).Fixed().Ident()
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
// in80 reports whether a is in ::/80: the IPv4-mapped and IPv4-compatible
// ranges, the unspecified and the loopback address.
func in80(a *[16]byte) bool {
	return binary.LittleEndian.Uint64(a[:8]) == 0 && a[8]|a[9] == 0
}

func setMapped(a *[16]byte, b [4]byte) {
	binary.LittleEndian.PutUint64(a[0:8], 0)
	binary.LittleEndian.PutUint64(a[8:16], 0xffff_0000|uint64(binary.LittleEndian.Uint32(b[:]))<<32)
}

// copy16 copies an address as two 8-byte words, for the same reason.
func copy16(dst, src *[16]byte) {
	binary.LittleEndian.PutUint64(dst[0:8], binary.LittleEndian.Uint64(src[0:8]))
	binary.LittleEndian.PutUint64(dst[8:16], binary.LittleEndian.Uint64(src[8:16]))
}
