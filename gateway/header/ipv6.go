package header

import "encoding/binary"

// IPv6 header (RFC 8200 §3):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version| Traffic Class |           Flow Label                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Payload Length        |  Next Header  |   Hop Limit   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+                         Source Address                        +
//	|                          (16 bytes)                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+                      Destination Address                      +
//	|                          (16 bytes)                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
const (
	v6VerTCFlow = 0
	v6PayLen    = 4
	v6NextHdr   = 6
	v6HopLimit  = 7
	v6Src       = 8
	v6Dst       = 24
)

const (
	// IPv6Len is the length of the fixed IPv6 header.
	IPv6Len = 40
	// IPv6AddrLen is the length of an IPv6 address.
	IPv6AddrLen = 16
	// IPv6Version is the value of the version field of IPv6.
	IPv6Version = 6
	// IPv6MinMTU is the minimum link MTU of IPv6 (RFC 8200 §5).
	IPv6MinMTU = 1280
)

// IPv6 is a view of an IPv6 header and what follows; it must be at least
// IPv6Len bytes long.
type IPv6 []byte

// Fixed returns b cut to the fixed header (IPv6Len bytes) as a slice whose
// length the compiler knows, so that the accessors need no bounds checks
// (see IPv4.Fixed). It panics if b is shorter.
func (b IPv6) Fixed() IPv6 { return IPv6((*[IPv6Len]byte)(b)[:]) }

// IPv6Fields is what IPv6.Encode writes: the fixed IPv6 header.
type IPv6Fields struct {
	TrafficClass  uint8
	FlowLabel     uint32 // the low 20 bits
	PayloadLength uint16
	NextHeader    uint8
	HopLimit      uint8
	SrcAddr       [16]byte
	DstAddr       [16]byte
}

// Encode writes the whole fixed header from f, version 6. It panics if b is
// shorter than IPv6Len.
func (b IPv6) Encode(f *IPv6Fields) {
	h := (*[IPv6Len]byte)(b)
	binary.BigEndian.PutUint32(h[v6VerTCFlow:], IPv6Version<<28|uint32(f.TrafficClass)<<20|f.FlowLabel&0xfffff)
	binary.BigEndian.PutUint16(h[v6PayLen:], f.PayloadLength)
	h[v6NextHdr] = f.NextHeader
	h[v6HopLimit] = f.HopLimit
	*(*[16]byte)(h[v6Src:]) = f.SrcAddr
	*(*[16]byte)(h[v6Dst:]) = f.DstAddr
}

// Version returns the version field.
func (b IPv6) Version() uint8 { return b[v6VerTCFlow] >> 4 }

// PayloadLength returns the length of what follows the fixed header,
// extension headers included.
func (b IPv6) PayloadLength() uint16 { return binary.BigEndian.Uint16(b[v6PayLen:]) }

// NextHeader returns the type of the header after the fixed header.
func (b IPv6) NextHeader() uint8 { return b[v6NextHdr] }

// HopLimit returns the hop limit.
func (b IPv6) HopLimit() uint8 { return b[v6HopLimit] }

// SrcAddr returns the source address.
func (b IPv6) SrcAddr() [16]byte { return [16]byte(b[v6Src : v6Src+16]) }

// DstAddr returns the destination address.
func (b IPv6) DstAddr() [16]byte { return [16]byte(b[v6Dst : v6Dst+16]) }

// SetVersionTrafficClassFlowLabel sets version 6, the traffic class and the
// flow label.
func (b IPv6) SetVersionTrafficClassFlowLabel(tc uint8, flow uint32) {
	binary.BigEndian.PutUint32(b[v6VerTCFlow:], IPv6Version<<28|uint32(tc)<<20|flow&0xfffff)
}

// SetPayloadLength sets the payload length.
func (b IPv6) SetPayloadLength(v uint16) { binary.BigEndian.PutUint16(b[v6PayLen:], v) }

// SetNextHeader sets the next header.
func (b IPv6) SetNextHeader(v uint8) { b[v6NextHdr] = v }

// SetHopLimit sets the hop limit.
func (b IPv6) SetHopLimit(v uint8) { b[v6HopLimit] = v }

// DecHopLimit decrements the hop limit (IPv6 has no header checksum) and
// returns the new value.
func (b IPv6) DecHopLimit() uint8 {
	b[v6HopLimit]--
	return b[v6HopLimit]
}

// SetSrcAddr sets the source address.
func (b IPv6) SetSrcAddr(a [16]byte) { copy(b[v6Src:v6Src+16], a[:]) }

// SetDstAddr sets the destination address.
func (b IPv6) SetDstAddr(a [16]byte) { copy(b[v6Dst:v6Dst+16], a[:]) }

// PseudoHeaderChecksum returns the pseudo-header running sum for the
// upper-layer protocol proto of length length.
func (b IPv6) PseudoHeaderChecksum(proto uint8, length uint16) uint32 {
	return PseudoHeaderChecksum(proto, b[v6Src:v6Src+16], b[v6Dst:v6Dst+16], length)
}

// IPv6 extension headers (RFC 8200 §4). All but Fragment and AH share:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Next Header  |  Hdr Ext Len  |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	.          (Hdr Ext Len + 1) * 8 bytes in all                   .
//
// Fragment (RFC 8200 §4.5), always 8 bytes:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Next Header  |   Reserved    |      Fragment Offset    |Res|M|
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                         Identification                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
const (
	extNextHdr   = 0
	extLen       = 1
	fragOffFlags = 2
	fragID       = 4
	// routingSegLeft is the Segments Left byte of a Routing header
	// (RFC 8200 §4.4), after Next Header, Hdr Ext Len and Routing Type.
	routingSegLeft = 3
	// IPv6FragmentLen is the length of the IPv6 Fragment header.
	IPv6FragmentLen = 8
	// IPv6MaxExtHeaders bounds the extension-header walk. RFC 8200 §4.1 allows
	// each header once (Destination Options twice), so 8 covers every
	// conforming packet; longer chains are treated as an attack.
	IPv6MaxExtHeaders = 8
)

// IPv6ExtStatus is the outcome of an extension-header walk.
type IPv6ExtStatus uint8

const (
	// IPv6ExtOK means the walk reached an upper-layer header, ESP, No Next
	// Header or a non-first fragment.
	IPv6ExtOK IPv6ExtStatus = iota
	// IPv6ExtTruncated means an extension header runs past the packet.
	IPv6ExtTruncated
	// IPv6ExtTooMany means the chain is longer than IPv6MaxExtHeaders.
	IPv6ExtTooMany
	// IPv6ExtBadHopByHop means a Hop-by-Hop header is not right after the
	// fixed header (RFC 8200 §4.3).
	IPv6ExtBadHopByHop
)

// IPv6Ext is the result of IPv6.WalkExtensionsStopAtAH.
type IPv6Ext struct {
	// Offset is the offset from the start of the IPv6 header of the header
	// of protocol Proto (the L4 header); valid iff Status == IPv6ExtOK.
	Offset int
	// FragID is the fragment identification; valid iff Fragment.
	FragID uint32
	// FragOffset is the fragment offset in bytes; valid iff Fragment.
	FragOffset uint16
	// Status says whether the walk succeeded.
	Status IPv6ExtStatus
	// Proto is the final protocol: TCP, UDP, ICMPv6, ESP, No Next Header, or
	// the next header of a non-first fragment; valid iff Status == IPv6ExtOK.
	Proto uint8
	// Fragment reports that a Fragment header was seen.
	Fragment bool
	// MoreFragments is the M flag of the Fragment header; valid iff Fragment.
	MoreFragments bool
	// SourceRouted reports a Routing header with Segments Left above zero
	// before the chain's end: the destination address is only the next
	// hop (RFC 8200 §4.4). One with Segments Left zero is ignored, as the
	// RFC says.
	SourceRouted bool
}

// NonFirstFragment reports whether the packet is a fragment other than the
// first: its L4 header is not present.
func (e IPv6Ext) NonFirstFragment() bool { return e.Fragment && e.FragOffset != 0 }

// IsIPv6Extension reports whether next header p is an extension header
// (AH included: the walk ends there). A packet whose fixed header's next header is
// not one needs no walk: its transport header follows at IPv6Len, and the
// packet path checks this before paying for the call.
func IsIPv6Extension(p uint8) bool {
	switch p {
	case ProtoHopByHop, ProtoRouting, ProtoDestOpts, ProtoAH, ProtoFragment:
		return true
	}
	return false
}

// WalkExtensionsStopAtAH follows the extension-header chain from the fixed
// header and returns the final protocol and its offset. The walk stays
// inside b[:IPv6Len+PayloadLength] (or b, if shorter), stops at ESP (its
// contents are encrypted), No Next Header, an upper-layer protocol, or the
// payload of a non-first fragment, and visits at most IPv6MaxExtHeaders
// headers. AH ends the chain like ESP does (Proto is ProtoAH, Offset its
// offset): a translator cannot rewrite the addresses AH authenticates and
// must not treat the header after it as the packet's transport header. b
// must be at least IPv6Len bytes long.
func (b IPv6) WalkExtensionsStopAtAH() IPv6Ext {
	end := IPv6Len + int(b.PayloadLength())
	if end > len(b) {
		end = len(b)
	}
	var r IPv6Ext
	next := b[v6NextHdr]
	off := IPv6Len
	for n := 0; ; n++ {
		var hl int
		if !IsIPv6Extension(next) || next == ProtoAH {
			// Upper layer, ESP, AH, No Next Header or unknown: the chain
			// ends.
			r.Proto, r.Offset = next, off
			return r
		}
		if n == IPv6MaxExtHeaders {
			r.Status = IPv6ExtTooMany
			return r
		}
		if next == ProtoHopByHop && n != 0 {
			r.Status = IPv6ExtBadHopByHop
			return r
		}
		if off+8 > end {
			r.Status = IPv6ExtTruncated
			return r
		}
		switch next {
		case ProtoFragment:
			hl = IPv6FragmentLen
			fo := binary.BigEndian.Uint16(b[off+fragOffFlags:])
			r.Fragment = true
			r.FragOffset = fo &^ 7
			r.MoreFragments = fo&1 != 0
			r.FragID = binary.BigEndian.Uint32(b[off+fragID:])
		case ProtoRouting:
			hl = (int(b[off+extLen]) + 1) * 8
			if b[off+routingSegLeft] != 0 {
				r.SourceRouted = true
			}
		default:
			hl = (int(b[off+extLen]) + 1) * 8
		}
		if off+hl > end {
			r.Status = IPv6ExtTruncated
			return r
		}
		next = b[off+extNextHdr]
		off += hl
		if r.Fragment && r.FragOffset != 0 {
			// A non-first fragment carries no further headers to parse.
			r.Proto, r.Offset = next, off
			return r
		}
	}
}
