package header

import "encoding/binary"

// IPv4 header (RFC 791 §3.1):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version|  IHL  |Type of Service|          Total Length         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Identification        |Flags|      Fragment Offset    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Time to Live |    Protocol   |         Header Checksum       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Source Address                          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Destination Address                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Options                    |    Padding    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
const (
	v4VerIHL    = 0
	v4TOS       = 1
	v4TotalLen  = 2
	v4ID        = 4
	v4FlagsFrag = 6
	v4TTL       = 8
	v4Protocol  = 9
	v4Checksum  = 10
	v4Src       = 12
	v4Dst       = 16
)

const (
	// IPv4MinLen is the length of an IPv4 header without options.
	IPv4MinLen = 20
	// IPv4MaxLen is the longest IPv4 header (IHL 15).
	IPv4MaxLen = 60
	// IPv4AddrLen is the length of an IPv4 address.
	IPv4AddrLen = 4
	// IPv4Version is the value of the version field of IPv4.
	IPv4Version = 4
)

// IPv4 flag bits as returned by IPv4.Flags.
const (
	// IPv4FlagMoreFragments is the MF bit.
	IPv4FlagMoreFragments uint8 = 1
	// IPv4FlagDontFragment is the DF bit.
	IPv4FlagDontFragment uint8 = 2
)

// IP protocol numbers (IANA), shared by IPv4 Protocol and IPv6 Next Header.
const (
	// ProtoHopByHop is the IPv6 Hop-by-Hop Options header.
	ProtoHopByHop uint8 = 0
	// ProtoICMPv4 is ICMP for IPv4.
	ProtoICMPv4 uint8 = 1
	// ProtoTCP is TCP.
	ProtoTCP uint8 = 6
	// ProtoUDP is UDP.
	ProtoUDP uint8 = 17
	// ProtoRouting is the IPv6 Routing header.
	ProtoRouting uint8 = 43
	// ProtoFragment is the IPv6 Fragment header.
	ProtoFragment uint8 = 44
	// ProtoESP is the IPsec Encapsulating Security Payload.
	ProtoESP uint8 = 50
	// ProtoAH is the IPsec Authentication Header.
	ProtoAH uint8 = 51
	// ProtoICMPv6 is ICMP for IPv6.
	ProtoICMPv6 uint8 = 58
	// ProtoNoNextHeader is IPv6 No Next Header.
	ProtoNoNextHeader uint8 = 59
	// ProtoDestOpts is the IPv6 Destination Options header.
	ProtoDestOpts uint8 = 60
)

// IPv4 is a view of an IPv4 header and what follows; it must be at least
// IPv4MinLen bytes long, and the caller checks the header length against the
// slice before reading options or payload.
type IPv4 []byte

// Fixed returns b cut to the fixed header (IPv4MinLen bytes) as a slice
// whose length the compiler knows, so that the accessors of the fixed fields
// need no bounds checks: the packet path validates a header once, then
// reads and writes it through this view. It panics if b is shorter; the
// result has no options or payload (use b for those).
func (b IPv4) Fixed() IPv4 { return IPv4((*[IPv4MinLen]byte)(b)[:]) }

// IPv4Fields is what IPv4.Encode writes: an IPv4 header without options.
type IPv4Fields struct {
	TOS            uint8
	TotalLength    uint16
	ID             uint16
	Flags          uint8  // IPv4FlagDontFragment, IPv4FlagMoreFragments
	FragmentOffset uint16 // in bytes, a multiple of 8
	TTL            uint8
	Protocol       uint8
	SrcAddr        [4]byte
	DstAddr        [4]byte
}

// Encode writes the whole fixed header from f: version 4, IHL 5 (no
// options) and a zero checksum, which the caller sets last
// (CalculateChecksum, or a sum it keeps). It panics if b is shorter than
// IPv4MinLen.
func (b IPv4) Encode(f *IPv4Fields) {
	h := (*[IPv4MinLen]byte)(b)
	h[v4VerIHL] = IPv4Version<<4 | IPv4MinLen/4
	h[v4TOS] = f.TOS
	binary.BigEndian.PutUint16(h[v4TotalLen:], f.TotalLength)
	binary.BigEndian.PutUint16(h[v4ID:], f.ID)
	binary.BigEndian.PutUint16(h[v4FlagsFrag:], uint16(f.Flags&7)<<13|(f.FragmentOffset>>3)&0x1fff)
	h[v4TTL] = f.TTL
	h[v4Protocol] = f.Protocol
	binary.BigEndian.PutUint16(h[v4Checksum:], 0)
	*(*[4]byte)(h[v4Src:]) = f.SrcAddr
	*(*[4]byte)(h[v4Dst:]) = f.DstAddr
}

// Version returns the version field.
func (b IPv4) Version() uint8 { return b[v4VerIHL] >> 4 }

// IPv4 option types (RFC 791 §3.1; the copied flag is part of the type).
const (
	v4OptEnd  = 0    // End of Option List: the rest is padding
	v4OptNOP  = 1    // No Operation: one byte
	v4OptLSRR = 0x83 // Loose Source and Record Route
	v4OptSSRR = 0x89 // Strict Source and Record Route
)

// SourceRouted walks the options of header b (b holds at least
// HeaderLength bytes) and reports whether they carry a loose or strict
// source route: the destination address is then only the next hop. ok is
// false when an option before the first source route has a length below
// 2 or runs past the header, which Linux refuses too.
func (b IPv4) SourceRouted() (routed, ok bool) {
	hl := b.HeaderLength()
	for off := IPv4MinLen; off < hl; {
		switch b[off] {
		case v4OptEnd:
			return false, true
		case v4OptNOP:
			off++
			continue
		}
		if off+1 >= hl {
			return false, false
		}
		n := int(b[off+1])
		if n < 2 || off+n > hl {
			return false, false
		}
		if t := b[off]; t == v4OptLSRR || t == v4OptSSRR {
			return true, true
		}
		off += n
	}
	return false, true
}

// HeaderLength returns the header length in bytes, options included.
func (b IPv4) HeaderLength() int { return int(b[v4VerIHL]&0x0f) * 4 }

// TotalLength returns the total length of the packet, header included.
func (b IPv4) TotalLength() uint16 { return binary.BigEndian.Uint16(b[v4TotalLen:]) }

// ID returns the identification field.
func (b IPv4) ID() uint16 { return binary.BigEndian.Uint16(b[v4ID:]) }

// Flags returns the 3 flag bits (IPv4FlagDontFragment, IPv4FlagMoreFragments).
func (b IPv4) Flags() uint8 { return b[v4FlagsFrag] >> 5 }

// MoreFragments reports whether the MF flag is set.
func (b IPv4) MoreFragments() bool { return b.Flags()&IPv4FlagMoreFragments != 0 }

// DontFragment reports whether the DF flag is set.
func (b IPv4) DontFragment() bool { return b.Flags()&IPv4FlagDontFragment != 0 }

// FragmentOffset returns the fragment offset in bytes (the field times 8).
func (b IPv4) FragmentOffset() uint16 {
	return (binary.BigEndian.Uint16(b[v4FlagsFrag:]) & 0x1fff) << 3
}

// IsFragment reports whether the packet is a fragment (MF set or offset not 0).
func (b IPv4) IsFragment() bool {
	return binary.BigEndian.Uint16(b[v4FlagsFrag:])&0x3fff != 0
}

// TTL returns the time to live.
func (b IPv4) TTL() uint8 { return b[v4TTL] }

// Protocol returns the protocol of the payload.
func (b IPv4) Protocol() uint8 { return b[v4Protocol] }

// Checksum returns the header checksum field.
func (b IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(b[v4Checksum:]) }

// SrcAddr returns the source address.
func (b IPv4) SrcAddr() [4]byte { return [4]byte(b[v4Src : v4Src+4]) }

// DstAddr returns the destination address.
func (b IPv4) DstAddr() [4]byte { return [4]byte(b[v4Dst : v4Dst+4]) }

// SetHeaderLength sets IHL from a length in bytes (a multiple of 4, 20–60)
// and the version to 4.
func (b IPv4) SetHeaderLength(n int) { b[v4VerIHL] = IPv4Version<<4 | uint8(n/4)&0x0f }

// SetTotalLength sets the total length.
func (b IPv4) SetTotalLength(v uint16) { binary.BigEndian.PutUint16(b[v4TotalLen:], v) }

// SetFlagsFragmentOffset sets the 3 flag bits and the fragment offset given
// in bytes (a multiple of 8).
func (b IPv4) SetFlagsFragmentOffset(flags uint8, offset uint16) {
	binary.BigEndian.PutUint16(b[v4FlagsFrag:], uint16(flags&7)<<13|(offset>>3)&0x1fff)
}

// SetTTL sets the time to live.
func (b IPv4) SetTTL(v uint8) { b[v4TTL] = v }

// SetProtocol sets the protocol.
func (b IPv4) SetProtocol(v uint8) { b[v4Protocol] = v }

// SetChecksum sets the header checksum field.
func (b IPv4) SetChecksum(v uint16) { binary.BigEndian.PutUint16(b[v4Checksum:], v) }

// SetSrcAddr sets the source address (the checksum is not updated).
func (b IPv4) SetSrcAddr(a [4]byte) { copy(b[v4Src:v4Src+4], a[:]) }

// SetDstAddr sets the destination address (the checksum is not updated).
func (b IPv4) SetDstAddr(a [4]byte) { copy(b[v4Dst:v4Dst+4], a[:]) }

// CalculateChecksum returns the header checksum computed over the header
// and options, ignoring the current value of the checksum field.
func (b IPv4) CalculateChecksum() uint16 {
	hl := b.HeaderLength()
	s := Checksum(b[:v4Checksum], 0)
	s = Checksum(b[v4Checksum+2:hl], s)
	return ChecksumFold(s)
}

// DecTTL decrements the TTL and updates the header checksum incrementally
// (RFC 1624). It returns the new TTL; callers check for 0 (or for TTL <= 1
// before the call) to answer with ICMP time exceeded. The new TTL/protocol
// word is computed from the old one rather than read back after a byte
// store, which would stall store-to-load forwarding on the packet path.
func (b IPv4) DecTTL() uint8 {
	old := binary.BigEndian.Uint16(b[v4TTL:])
	nw := old - 0x0100
	binary.BigEndian.PutUint16(b[v4TTL:], nw)
	b.SetChecksum(ChecksumUpdate16(b.Checksum(), old, nw))
	return uint8(nw >> 8)
}

// SetSrcAddrWithChecksumUpdate sets the source address and updates the
// header checksum incrementally; transport checksums are the caller's.
func (b IPv4) SetSrcAddrWithChecksumUpdate(a [4]byte) {
	b.SetChecksum(ChecksumUpdateAddr(b.Checksum(), b[v4Src:v4Src+4], a[:]))
	b.SetSrcAddr(a)
}

// SetDstAddrWithChecksumUpdate sets the destination address and updates the
// header checksum incrementally; transport checksums are the caller's.
func (b IPv4) SetDstAddrWithChecksumUpdate(a [4]byte) {
	b.SetChecksum(ChecksumUpdateAddr(b.Checksum(), b[v4Dst:v4Dst+4], a[:]))
	b.SetDstAddr(a)
}
