package header

import "encoding/binary"

// VXLAN header (RFC 7348 §5):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|R|R|R|R|I|R|R|R|            Reserved                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                VXLAN Network Identifier (VNI) |   Reserved    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
const (
	vxlanFlags = 0
	vxlanVNI   = 4
	// VXLANLen is the length of the VXLAN header.
	VXLANLen = 8
	// VXLANPort is the IANA UDP destination port of VXLAN.
	VXLANPort = 4789
	// VXLANFlagI is the I flag: the VNI is valid (must be set).
	VXLANFlagI uint8 = 0x08
	// MaxVNI is the largest 24-bit VNI.
	MaxVNI = 1<<24 - 1
)

// VXLAN is a view of a VXLAN header; it must be at least VXLANLen bytes long.
type VXLAN []byte

// IsValid reports whether b is long enough and has the I flag set (RFC 7348
// §5: other flag and reserved bits are ignored on receipt). It is safe on
// any slice.
func (b VXLAN) IsValid() bool { return len(b) >= VXLANLen && b[vxlanFlags]&VXLANFlagI != 0 }

// Fixed returns b cut to the header (VXLANLen bytes) as a slice whose
// length the compiler knows, so that the accessors need no bounds checks
// (see IPv4.Fixed). It panics if b is shorter.
func (b VXLAN) Fixed() VXLAN { return VXLAN((*[VXLANLen]byte)(b)[:]) }

// Flags returns the flags byte.
func (b VXLAN) Flags() uint8 { return b[vxlanFlags] }

// VNI returns the 24-bit VXLAN network identifier.
func (b VXLAN) VNI() uint32 { return binary.BigEndian.Uint32(b[vxlanVNI:]) >> 8 }

// Payload returns the inner Ethernet frame.
func (b VXLAN) Payload() []byte { return b[VXLANLen:] }

// SetFlags sets the flags byte.
func (b VXLAN) SetFlags(f uint8) { b[vxlanFlags] = f }

// SetVNI sets the VNI, keeping the reserved byte after it.
func (b VXLAN) SetVNI(vni uint32) {
	binary.BigEndian.PutUint32(b[vxlanVNI:], vni<<8|uint32(b[vxlanVNI+3]))
}

// Init writes a fresh header: I flag set, reserved bits zero, VNI vni.
func (b VXLAN) Init(vni uint32) {
	binary.BigEndian.PutUint32(b[0:], uint32(VXLANFlagI)<<24)
	binary.BigEndian.PutUint32(b[vxlanVNI:], vni<<8)
}

// Geneve header (RFC 8926 §3.4):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Ver|  Opt Len  |O|C|    Rsvd.  |          Protocol Type        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        Virtual Network Identifier (VNI)       |    Reserved   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Variable-Length Options                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Each option (RFC 8926 §3.5):
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Option Class         |      Type     |R|R|R| Length  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Variable-Length Option Data (Length * 4 bytes)       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
const (
	genVerOptLen = 0
	genFlags     = 1
	genProto     = 2
	genVNI       = 4
	// GeneveMinLen is the length of the Geneve header without options.
	GeneveMinLen = 8
	// GeneveMaxLen is the longest Geneve header (Opt Len 63).
	GeneveMaxLen = GeneveMinLen + 63*4
	// GenevePort is the IANA UDP destination port of Geneve.
	GenevePort = 6081
	// GeneveOptionHeaderLen is the length of an option's own header.
	GeneveOptionHeaderLen = 4
	// GeneveFlagO is the O (control packet) bit of the flags byte.
	GeneveFlagO uint8 = 0x80
	// GeneveFlagC is the C (critical options present) bit of the flags byte.
	GeneveFlagC uint8 = 0x40
	// GeneveOptionCritical is the critical bit of an option's Type.
	GeneveOptionCritical uint8 = 0x80
)

// Geneve is a view of a Geneve header; it must be at least GeneveMinLen
// bytes long (check with IsValid).
type Geneve []byte

// Fixed returns b cut to the option-less header (GeneveMinLen bytes) as a
// slice whose length the compiler knows, so that the accessors of its
// fields need no bounds checks (see IPv4.Fixed). It panics if b is shorter.
func (b Geneve) Fixed() Geneve { return Geneve((*[GeneveMinLen]byte)(b)[:]) }

// Version returns the 2-bit version (0 is the only one defined).
func (b Geneve) Version() uint8 { return b[genVerOptLen] >> 6 }

// OptLen returns the length of the options in 4-byte words.
func (b Geneve) OptLen() uint8 { return b[genVerOptLen] & 0x3f }

// HeaderLength returns the length of the header with its options in bytes.
func (b Geneve) HeaderLength() int { return GeneveMinLen + int(b.OptLen())*4 }

// OAM reports whether the O bit is set (a control packet, not to be
// forwarded as data).
func (b Geneve) OAM() bool { return b[genFlags]&GeneveFlagO != 0 }

// Critical reports whether the C bit is set: options with the critical bit
// are present and a receiver that does not understand them must drop.
func (b Geneve) Critical() bool { return b[genFlags]&GeneveFlagC != 0 }

// ProtocolType returns the EtherType of the payload (EtherTypeTEB for an
// Ethernet frame).
func (b Geneve) ProtocolType() uint16 { return binary.BigEndian.Uint16(b[genProto:]) }

// VNI returns the 24-bit virtual network identifier.
func (b Geneve) VNI() uint32 { return binary.BigEndian.Uint32(b[genVNI:]) >> 8 }

// Options returns the options bytes.
func (b Geneve) Options() []byte { return b[GeneveMinLen:b.HeaderLength()] }

// Payload returns what follows the header and its options.
func (b Geneve) Payload() []byte { return b[b.HeaderLength():] }

// SetVNI sets the VNI, keeping the reserved byte after it.
func (b Geneve) SetVNI(vni uint32) {
	binary.BigEndian.PutUint32(b[genVNI:], vni<<8|uint32(b[genVNI+3]))
}

// SetProtocolType sets the protocol type.
func (b Geneve) SetProtocolType(t uint16) { binary.BigEndian.PutUint16(b[genProto:], t) }

// SetFlags sets the O/C flags byte (reserved bits included).
func (b Geneve) SetFlags(f uint8) { b[genFlags] = f }

// SetOptLen sets version 0 and the options length in 4-byte words.
func (b Geneve) SetOptLen(words uint8) { b[genVerOptLen] = words & 0x3f }

// Init writes a fresh option-less header: version 0, no flags, protocol
// type EtherTypeTEB, VNI vni.
func (b Geneve) Init(vni uint32) {
	b[genVerOptLen], b[genFlags] = 0, 0
	binary.BigEndian.PutUint16(b[genProto:], EtherTypeTEB)
	binary.BigEndian.PutUint32(b[genVNI:], vni<<8)
}

// GeneveStatus is the outcome of Geneve.Validate.
type GeneveStatus uint8

const (
	// GeneveOK means the header and its options are well-formed.
	GeneveOK GeneveStatus = iota
	// GeneveTruncated means the packet is shorter than the header with its
	// options.
	GeneveTruncated
	// GeneveBadVersion means the version is not 0.
	GeneveBadVersion
	// GeneveBadOption means an option's length runs past the options area.
	GeneveBadOption
)

// Validate checks b as a Geneve header of a packet pktLen bytes long (the
// UDP payload): version 0, the header with its options inside pktLen, and
// every option's header and data inside the options area. It returns the
// header length (the payload offset), valid iff the status is GeneveOK. It is
// safe on any slice.
func (b Geneve) Validate(pktLen int) (int, GeneveStatus) {
	if len(b) < GeneveMinLen || pktLen > len(b) || pktLen < GeneveMinLen {
		return 0, GeneveTruncated
	}
	if b.Version() != 0 {
		return 0, GeneveBadVersion
	}
	hl := b.HeaderLength()
	if hl > pktLen {
		return 0, GeneveTruncated
	}
	for off := GeneveMinLen; off < hl; {
		next, ok := b.NextOption(off, hl)
		if !ok {
			return 0, GeneveBadOption
		}
		off = next
	}
	return hl, GeneveOK
}

// NextOption returns the offset of the option after the one at off, given
// the header length hl; ok is false when the option does not fit in b[:hl].
func (b Geneve) NextOption(off, hl int) (next int, ok bool) {
	if off < GeneveMinLen || off+GeneveOptionHeaderLen > hl || hl > len(b) {
		return 0, false
	}
	next = off + GeneveOptionHeaderLen + int(b[off+3]&0x1f)*4
	if next > hl {
		return 0, false
	}
	return next, true
}

// Option returns the class, type and data of the option at off, which must
// have been checked by Validate or NextOption.
func (b Geneve) Option(off int) (class uint16, typ uint8, data []byte) {
	n := int(b[off+3]&0x1f) * 4
	return binary.BigEndian.Uint16(b[off:]), b[off+2], b[off+GeneveOptionHeaderLen : off+GeneveOptionHeaderLen+n]
}
