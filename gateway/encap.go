package gateway

import (
	"encoding/binary"

	"github.com/egret-gw/egret/gateway/header"
)

// encapLen is the header length in front of an encapsulated inner IP packet:
// outer Ethernet, outer IP of family f, UDP, VXLAN or Geneve (without
// options; both are 8 bytes) and the inner Ethernet header.
func encapLen(f uint8) int {
	if f == 0 {
		return ethLen + ipv4MinLen + udpLen + vxlanLen + ethLen
	}
	return ethLen + ipv6Len + udpLen + vxlanLen + ethLen
}

// encapMax is the longest encapsulation after the outer Ethernet header:
// outer IPv6, UDP, VXLAN or Geneve, inner Ethernet.
const encapMax = ipv6Len + udpLen + vxlanLen + ethLen

// encapTemplate is a node's encapsulation headers after the outer Ethernet
// header, built once per snapshot: everything that is the same for every
// packet to the node (versions, DF, TTL, protocol, both VTEPs, the inner
// MACs). A reply copies it in one go and sets the few per-packet fields.
type encapTemplate struct {
	hdr [encapMax]byte
	// sum is the one's-complement sum of the constant fields that a
	// per-packet checksum covers, its length fields left 0: the outer IPv4
	// header, or the IPv6 UDP pseudo-header.
	sum uint32
}

// newEncapTemplate builds the template for a node at vtep (family f) of a
// gateway at gwVTEP with inner MAC gwMAC, for a node tunnel device nodeMAC.
func newEncapTemplate(f uint8, gwVTEP, vtep *[16]byte, gwMAC, nodeMAC *[6]byte) encapTemplate {
	var t encapTemplate
	h := t.hdr[:]
	var u int
	if f == 0 {
		ip := h[:ipv4MinLen]
		ip[0] = 0x45
		binary.BigEndian.PutUint32(ip[4:], 0x4000) // id 0, DF
		ip[8], ip[9] = 64, protoUDP
		copy(ip[12:16], gwVTEP[12:])
		copy(ip[16:20], vtep[12:])
		t.sum = header.Checksum(ip, 0)
		u = ipv4MinLen
	} else {
		ip := h[:ipv6Len]
		binary.BigEndian.PutUint32(ip[0:], 6<<28)
		ip[6], ip[7] = protoUDP, 64
		copy(ip[8:24], gwVTEP[:])
		copy(ip[24:40], vtep[:])
		t.sum = header.PseudoHeaderChecksum(protoUDP, gwVTEP[:], vtep[:], 0)
		u = ipv6Len
	}
	inner := h[u+udpLen+vxlanLen:]
	copy(inner[0:6], nodeMAC[:])
	copy(inner[6:12], gwMAC[:])
	return t
}

// writeEncap fills the encapsulation headers in front of the inner IP packet
// already at out[encapLen(node.fam):], addressed to node with tunnel type t
// and VNI vni: the next hop's Ethernet header, then the node's template and
// the per-packet fields (lengths, outer IPv4 header checksum from the
// template's sum, UDP source port, tunnel type, VNI, inner EtherType). The
// outer UDP checksum is 0 over IPv4 and computed over IPv6 (RFC 8200 §8.1;
// Linux VXLAN devices reject zero checksums over IPv6 by default).
func writeEncap(out []byte, node *snapNode, t Tunnel, vni uint32, hop *Hop, innerVer uint8, sport uint16) {
	n := len(out)
	hl := encapLen(node.fam)
	copy(out[ethLen:hl], node.encap.hdr[:hl-ethLen])
	writeEth(out, &hop.DstMAC, &hop.SrcMAC, 4+2*node.fam)
	u := ethLen + ipv4MinLen
	if node.fam == 0 {
		ip := (*[ipv4MinLen]byte)(out[ethLen : ethLen+ipv4MinLen])
		tl := uint16(n - ethLen)
		binary.BigEndian.PutUint16(ip[2:4], tl)
		binary.BigEndian.PutUint16(ip[10:12], header.ChecksumFold(node.encap.sum+uint32(tl)))
	} else {
		u = ethLen + ipv6Len
		binary.BigEndian.PutUint16(out[ethLen+4:ethLen+6], uint16(n-u))
	}
	h := (*[udpLen + vxlanLen + ethLen]byte)(out[u : u+udpLen+vxlanLen+ethLen])
	binary.BigEndian.PutUint16(h[0:2], sport)
	if t == TunnelGeneve {
		binary.BigEndian.PutUint16(h[2:4], genevePort)
		binary.BigEndian.PutUint32(h[8:12], etherTypeTEB) // ver 0, no options, not OAM/critical
	} else {
		binary.BigEndian.PutUint16(h[2:4], vxlanPort)
		binary.BigEndian.PutUint32(h[8:12], 0x08000000) // I flag
	}
	binary.BigEndian.PutUint16(h[4:6], uint16(n-u))
	binary.BigEndian.PutUint32(h[12:16], vni<<8)
	if innerVer == 4 {
		binary.BigEndian.PutUint16(h[28:30], etherTypeIPv4)
	} else {
		binary.BigEndian.PutUint16(h[28:30], etherTypeIPv6)
	}
	if node.fam == 1 {
		c := header.ChecksumFold(header.Checksum(out[u:n], node.encap.sum+uint32(n-u)))
		binary.BigEndian.PutUint16(h[6:8], header.UDPChecksumValue(c))
	}
}

// entropy picks the outer UDP source port from the inner flow so that
// ECMP/RSS on the path spread flows but keep each one on one path
// (RFC 7348 §5), in the range 49152–65535.
func entropy(a *[16]byte, port uint16, b *[16]byte) uint16 {
	x := binary.LittleEndian.Uint64(a[8:]) ^ binary.LittleEndian.Uint64(b[8:])*0x9e3779b97f4a7c15 ^ uint64(port)
	x *= 0xbf58476d1ce4e5b9
	return 49152 | uint16(x>>50)
}
