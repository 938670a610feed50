package header

import "encoding/binary"

// UDP header (RFC 768):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Source Port          |       Destination Port        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Length             |           Checksum            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
const (
	udpSrcPort  = 0
	udpDstPort  = 2
	udpLength   = 4
	udpChecksum = 6
	// UDPLen is the length of the UDP header.
	UDPLen = 8
)

// UDP is a view of a UDP header and its payload; it must be at least UDPLen
// bytes long.
type UDP []byte

// IsValid reports whether b holds a UDP header whose length field is at least
// UDPLen and at most pktLen (the bytes the IP layer says follow). It is safe
// on any slice.
func (b UDP) IsValid(pktLen int) bool {
	if len(b) < UDPLen || pktLen > len(b) {
		return false
	}
	l := int(b.Length())
	return l >= UDPLen && l <= pktLen
}

// Fixed returns b cut to the header (UDPLen bytes) as a slice whose length
// the compiler knows, so that the accessors need no bounds checks (see
// IPv4.Fixed). It panics if b is shorter.
func (b UDP) Fixed() UDP { return UDP((*[UDPLen]byte)(b)[:]) }

// SrcPort returns the source port.
func (b UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(b[udpSrcPort:]) }

// DstPort returns the destination port.
func (b UDP) DstPort() uint16 { return binary.BigEndian.Uint16(b[udpDstPort:]) }

// Length returns the length field (header and payload).
func (b UDP) Length() uint16 { return binary.BigEndian.Uint16(b[udpLength:]) }

// Checksum returns the checksum field (0 means none, IPv4 only).
func (b UDP) Checksum() uint16 { return binary.BigEndian.Uint16(b[udpChecksum:]) }

// Payload returns the bytes after the header up to the length field.
func (b UDP) Payload() []byte { return b[UDPLen:b.Length()] }

// SetSrcPort sets the source port.
func (b UDP) SetSrcPort(p uint16) { binary.BigEndian.PutUint16(b[udpSrcPort:], p) }

// SetDstPort sets the destination port.
func (b UDP) SetDstPort(p uint16) { binary.BigEndian.PutUint16(b[udpDstPort:], p) }

// SetLength sets the length field.
func (b UDP) SetLength(l uint16) { binary.BigEndian.PutUint16(b[udpLength:], l) }

// SetChecksum sets the checksum field.
func (b UDP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(b[udpChecksum:], c) }

// CalculateChecksum returns the checksum of the header and b[UDPLen:Length()]
// given the pseudo-header running sum, ignoring the current checksum field,
// with a computed 0 turned into 0xffff (RFC 768).
func (b UDP) CalculateChecksum(pseudo uint32) uint16 {
	s := Checksum(b[:udpChecksum], pseudo)
	s = Checksum(b[udpChecksum+2:b.Length()], s)
	return UDPChecksumValue(ChecksumFold(s))
}

// UpdateChecksum16 updates the checksum for a 16-bit word of the covered
// data (a port) changing from old to new. A zero checksum (IPv4 "none") is
// left alone and a result of 0 is sent as 0xffff.
func (b UDP) UpdateChecksum16(old, new uint16) {
	if c := b.Checksum(); c != 0 {
		b.SetChecksum(UDPChecksumValue(ChecksumUpdate16(c, old, new)))
	}
}

// UpdateChecksumAddr updates the checksum for a pseudo-header address
// changing from old to new, with the zero rules of UpdateChecksum16.
func (b UDP) UpdateChecksumAddr(old, new []byte) {
	if c := b.Checksum(); c != 0 {
		b.SetChecksum(UDPChecksumValue(ChecksumUpdateAddr(c, old, new)))
	}
}
