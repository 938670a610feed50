package header

import "encoding/binary"

// Ethernet II frame header (IEEE 802.3):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Destination MAC address                    |
//	+                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	|                      Source MAC address                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           EtherType           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
const (
	ethDst  = 0
	ethSrc  = 6
	ethType = 12
)

// 802.1Q / 802.1ad tag following the source MAC (the tag's EtherType
// 0x8100/0x88A8 sits where the frame's EtherType would be):
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   TPID (0x8100 or 0x88A8)     | PCP |D|         VLAN ID       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|     EtherType (or next TPID)  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
const (
	// EthernetLen is the length of an untagged Ethernet header.
	EthernetLen = 14
	// VLANLen is the length one 802.1Q/802.1ad tag adds to the header.
	VLANLen = 4
	// MACLen is the length of a MAC address.
	MACLen = 6
)

// EtherType values.
const (
	// EtherTypeIPv4 is the EtherType of IPv4.
	EtherTypeIPv4 uint16 = 0x0800
	// EtherTypeARP is the EtherType of ARP.
	EtherTypeARP uint16 = 0x0806
	// EtherTypeIPv6 is the EtherType of IPv6.
	EtherTypeIPv6 uint16 = 0x86DD
	// EtherTypeVLAN is the 802.1Q customer VLAN tag protocol identifier.
	EtherTypeVLAN uint16 = 0x8100
	// EtherTypeQinQ is the 802.1ad service VLAN tag protocol identifier.
	EtherTypeQinQ uint16 = 0x88A8
	// EtherTypeTEB is Transparent Ethernet Bridging (Geneve protocol type).
	EtherTypeTEB uint16 = 0x6558
)

// Ethernet is a view of an Ethernet II header; it must be at least
// EthernetLen bytes long.
type Ethernet []byte

// Fixed returns b cut to the untagged header (EthernetLen bytes) as a slice
// whose length the compiler knows, so that the accessors need no bounds
// checks (see IPv4.Fixed). It panics if b is shorter.
func (b Ethernet) Fixed() Ethernet { return Ethernet((*[EthernetLen]byte)(b)[:]) }

// EthernetFields is what Ethernet.Encode writes: an untagged header.
type EthernetFields struct {
	DstMAC [MACLen]byte
	SrcMAC [MACLen]byte
	Type   uint16 // EtherType
}

// Encode writes the header from f. It panics if b is shorter than
// EthernetLen.
func (b Ethernet) Encode(f *EthernetFields) {
	h := (*[EthernetLen]byte)(b)
	*(*[MACLen]byte)(h[ethDst:]) = f.DstMAC
	*(*[MACLen]byte)(h[ethSrc:]) = f.SrcMAC
	binary.BigEndian.PutUint16(h[ethType:], f.Type)
}

// EtherType returns the EtherType field right after the MAC addresses (a
// VLAN TPID when the frame is tagged).
func (b Ethernet) EtherType() uint16 { return binary.BigEndian.Uint16(b[ethType:]) }

// SetDstMAC sets the destination MAC address.
func (b Ethernet) SetDstMAC(m [6]byte) { copy(b[ethDst:ethDst+MACLen], m[:]) }

// SetSrcMAC sets the source MAC address.
func (b Ethernet) SetSrcMAC(m [6]byte) { copy(b[ethSrc:ethSrc+MACLen], m[:]) }

// SetEtherType sets the EtherType field right after the MAC addresses.
func (b Ethernet) SetEtherType(t uint16) { binary.BigEndian.PutUint16(b[ethType:], t) }
