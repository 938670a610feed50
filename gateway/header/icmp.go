package header

import "encoding/binary"

// ICMPv4 (RFC 792) and ICMPv6 (RFC 4443) share the first 8 bytes' shape:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     Type      |     Code      |          Checksum             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Identifier (echo)            |   Sequence Number (echo)      |
//	|  unused (v4 frag needed)      |   Next-Hop MTU (v4, RFC 1191) |
//	|                 MTU (v6 packet too big)                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Echo data, or for errors as much of the invoking packet as   |
//	|  fits (its IP header first)                                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
const (
	icmpType     = 0
	icmpCode     = 1
	icmpChecksum = 2
	icmpIdent    = 4
	icmpSeq      = 6
	icmpV4MTU    = 6
	icmpV6MTU    = 4
	// ICMPv4MinLen is the length of the ICMPv4 header.
	ICMPv4MinLen = 8
	// ICMPv6MinLen is the length of the ICMPv6 header.
	ICMPv6MinLen = 8
)

// ICMPv4 types and codes.
const (
	// ICMPv4EchoReply is the echo reply type.
	ICMPv4EchoReply uint8 = 0
	// ICMPv4DstUnreachable is the destination unreachable type.
	ICMPv4DstUnreachable uint8 = 3
	// ICMPv4EchoRequest is the echo request type.
	ICMPv4EchoRequest uint8 = 8
	// ICMPv4TimeExceeded is the time exceeded type.
	ICMPv4TimeExceeded uint8 = 11
	// ICMPv4ParamProblem is the parameter problem type.
	ICMPv4ParamProblem uint8 = 12
	// ICMPv4FragNeeded is the destination unreachable code "fragmentation
	// needed and DF set" (RFC 1191).
	ICMPv4FragNeeded uint8 = 4
	// ICMPv4TTLExceeded is the time exceeded code "TTL exceeded in transit".
	ICMPv4TTLExceeded uint8 = 0
	// ICMPv4HostUnreachable is the destination unreachable code "host
	// unreachable".
	ICMPv4HostUnreachable uint8 = 1
	// ICMPv4PortUnreachable is the destination unreachable code "port
	// unreachable".
	ICMPv4PortUnreachable uint8 = 3
)

// ICMPv6 types and codes.
const (
	// ICMPv6DstUnreachable is the destination unreachable type.
	ICMPv6DstUnreachable uint8 = 1
	// ICMPv6PacketTooBig is the packet too big type.
	ICMPv6PacketTooBig uint8 = 2
	// ICMPv6TimeExceeded is the time exceeded type.
	ICMPv6TimeExceeded uint8 = 3
	// ICMPv6ParamProblem is the parameter problem type.
	ICMPv6ParamProblem uint8 = 4
	// ICMPv6EchoRequest is the echo request type.
	ICMPv6EchoRequest uint8 = 128
	// ICMPv6EchoReply is the echo reply type.
	ICMPv6EchoReply uint8 = 129
	// ICMPv6HopLimitExceeded is the time exceeded code "hop limit exceeded
	// in transit".
	ICMPv6HopLimitExceeded uint8 = 0
	// ICMPv6AddrUnreachable is the destination unreachable code "address
	// unreachable".
	ICMPv6AddrUnreachable uint8 = 3
	// ICMPv6PortUnreachable is the destination unreachable code "port
	// unreachable".
	ICMPv6PortUnreachable uint8 = 4
)

// ICMPv4 is a view of an ICMPv4 message; it must be at least ICMPv4MinLen
// bytes long.
type ICMPv4 []byte

// Fixed returns b cut to the header (ICMPv4MinLen bytes) as a slice whose
// length the compiler knows, so that the accessors need no bounds checks
// (see IPv4.Fixed). It panics if b is shorter.
func (b ICMPv4) Fixed() ICMPv4 { return ICMPv4((*[ICMPv4MinLen]byte)(b)[:]) }

// ICMPFields is what ICMPv4.Encode and ICMPv6.Encode write: the 8-byte
// header the two share.
type ICMPFields struct {
	Type uint8
	Code uint8
	// Rest is the second word: an echo's identifier (high 16 bits) and
	// sequence number, the next-hop MTU of an ICMPv4 fragmentation needed
	// (low 16 bits, RFC 1191), the MTU of an ICMPv6 packet too big, or 0
	// where the type leaves it unused.
	Rest uint32
}

// encodeICMP writes f into the first ICMPv4MinLen (= ICMPv6MinLen) bytes of
// b with a zero checksum.
func encodeICMP(b []byte, f *ICMPFields) {
	h := (*[ICMPv4MinLen]byte)(b)
	h[icmpType] = f.Type
	h[icmpCode] = f.Code
	binary.BigEndian.PutUint16(h[icmpChecksum:], 0)
	binary.BigEndian.PutUint32(h[icmpIdent:], f.Rest)
}

// Encode writes the header from f with a zero checksum, which covers the
// message body and so is the caller's, last (CalculateChecksum). It panics
// if b is shorter than ICMPv4MinLen.
func (b ICMPv4) Encode(f *ICMPFields) { encodeICMP(b, f) }

// Type returns the message type.
func (b ICMPv4) Type() uint8 { return b[icmpType] }

// Code returns the message code.
func (b ICMPv4) Code() uint8 { return b[icmpCode] }

// Checksum returns the checksum field.
func (b ICMPv4) Checksum() uint16 { return binary.BigEndian.Uint16(b[icmpChecksum:]) }

// Ident returns the echo identifier.
func (b ICMPv4) Ident() uint16 { return binary.BigEndian.Uint16(b[icmpIdent:]) }

// SetChecksum sets the checksum field.
func (b ICMPv4) SetChecksum(c uint16) { binary.BigEndian.PutUint16(b[icmpChecksum:], c) }

// SetIdent sets the echo identifier.
func (b ICMPv4) SetIdent(v uint16) { binary.BigEndian.PutUint16(b[icmpIdent:], v) }

// CalculateChecksum returns the checksum over all of b (ICMPv4 has no
// pseudo-header), ignoring the current checksum field.
func (b ICMPv4) CalculateChecksum() uint16 {
	s := Checksum(b[:icmpChecksum], 0)
	return ChecksumFold(Checksum(b[icmpChecksum+2:], s))
}

// ICMPv6 is a view of an ICMPv6 message; it must be at least ICMPv6MinLen
// bytes long.
type ICMPv6 []byte

// Fixed returns b cut to the header (ICMPv6MinLen bytes) as a slice whose
// length the compiler knows, so that the accessors need no bounds checks
// (see IPv4.Fixed). It panics if b is shorter.
func (b ICMPv6) Fixed() ICMPv6 { return ICMPv6((*[ICMPv6MinLen]byte)(b)[:]) }

// Encode writes the header from f with a zero checksum, which covers the
// message body and the pseudo-header and so is the caller's, last
// (CalculateChecksum). It panics if b is shorter than ICMPv6MinLen.
func (b ICMPv6) Encode(f *ICMPFields) { encodeICMP(b, f) }

// Type returns the message type.
func (b ICMPv6) Type() uint8 { return b[icmpType] }

// Code returns the message code.
func (b ICMPv6) Code() uint8 { return b[icmpCode] }

// Checksum returns the checksum field.
func (b ICMPv6) Checksum() uint16 { return binary.BigEndian.Uint16(b[icmpChecksum:]) }

// Ident returns the echo identifier.
func (b ICMPv6) Ident() uint16 { return binary.BigEndian.Uint16(b[icmpIdent:]) }

// SetChecksum sets the checksum field.
func (b ICMPv6) SetChecksum(c uint16) { binary.BigEndian.PutUint16(b[icmpChecksum:], c) }

// SetIdent sets the echo identifier.
func (b ICMPv6) SetIdent(v uint16) { binary.BigEndian.PutUint16(b[icmpIdent:], v) }

// CalculateChecksum returns the checksum over all of b given the IPv6
// pseudo-header running sum (see IPv6.PseudoHeaderChecksum with
// ProtoICMPv6), ignoring the current checksum field.
func (b ICMPv6) CalculateChecksum(pseudo uint32) uint16 {
	s := Checksum(b[:icmpChecksum], pseudo)
	return ChecksumFold(Checksum(b[icmpChecksum+2:], s))
}
