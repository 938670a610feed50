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

// Fixed returns b cut to the header (VXLANLen bytes) as a slice whose
// length the compiler knows, so that the accessors need no bounds checks
// (see IPv4.Fixed). It panics if b is shorter.
func (b VXLAN) Fixed() VXLAN { return VXLAN((*[VXLANLen]byte)(b)[:]) }

// Flags returns the flags byte.
func (b VXLAN) Flags() uint8 { return b[vxlanFlags] }

// VNI returns the 24-bit VXLAN network identifier.
func (b VXLAN) VNI() uint32 { return binary.BigEndian.Uint32(b[vxlanVNI:]) >> 8 }

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
// bytes long.
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

// Init writes a fresh option-less header: version 0, no flags, protocol
// type EtherTypeTEB, VNI vni.
func (b Geneve) Init(vni uint32) {
	b[genVerOptLen], b[genFlags] = 0, 0
	binary.BigEndian.PutUint16(b[genProto:], EtherTypeTEB)
	binary.BigEndian.PutUint32(b[genVNI:], vni<<8)
}
