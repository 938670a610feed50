package header

import "encoding/binary"

// The packet path validates headers in gateway/parse.go (length checks, then
// Fixed views), so the views have no IsValid of their own; the tests below
// check well-formedness with these instead.

// ipv4Valid reports whether b starts with a well-formed IPv4 header:
// version 4, IHL at least 5, header length at most total length, total
// length at most len(b).
func ipv4Valid(b []byte) bool {
	if len(b) < IPv4MinLen || b[0]>>4 != IPv4Version {
		return false
	}
	hl, tl := int(b[0]&0x0f)*4, int(binary.BigEndian.Uint16(b[2:]))
	return hl >= IPv4MinLen && hl <= tl && tl <= len(b)
}

// ipv6Valid reports whether b starts with an IPv6 header whose payload
// length fits in b.
func ipv6Valid(b []byte) bool {
	return len(b) >= IPv6Len && b[0]>>4 == IPv6Version && IPv6Len+int(IPv6(b).PayloadLength()) <= len(b)
}

// ipv4ChecksumOK reports whether the header checksum of IPv4 header b verifies.
func ipv4ChecksumOK(b IPv4) bool { return ChecksumFold(Checksum(b[:b.HeaderLength()], 0)) == 0 }

// l4Checksum returns the checksum of seg (a TCP segment or UDP datagram)
// given the pseudo-header sum, skipping the checksum field at off.
func l4Checksum(seg []byte, off int, pseudo uint32) uint16 {
	s := Checksum(seg[:off], pseudo)
	return ChecksumFold(Checksum(seg[off+2:], s))
}
