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

// writeEncap fills the encapsulation headers in front of the inner IP packet
// already at out[encapLen(node.fam):], addressed to node with tunnel type t
// and VNI vni. The outer UDP checksum is 0 over IPv4 and computed over IPv6
// (RFC 8200 §8.1; Linux VXLAN devices reject zero checksums over IPv6 by
// default).
func writeEncap(out []byte, s *Snapshot, node *snapNode, t Tunnel, vni uint32, hop *Hop, innerVer uint8, sport uint16) {
	n := len(out)
	writeEth(out, &hop.DstMAC, &hop.SrcMAC, 4+2*node.fam)
	var u int
	if node.fam == 0 {
		ip := out[ethLen : ethLen+ipv4MinLen]
		ip[0], ip[1] = 0x45, 0
		binary.BigEndian.PutUint16(ip[2:], uint16(n-ethLen))
		binary.BigEndian.PutUint32(ip[4:], 0x4000) // id 0, DF
		ip[8], ip[9], ip[10], ip[11] = 64, protoUDP, 0, 0
		copy(ip[12:16], s.vtep[0][12:])
		copy(ip[16:20], node.vtep[12:])
		binary.BigEndian.PutUint16(ip[10:], header.ChecksumFold(header.Checksum(ip, 0)))
		u = ethLen + ipv4MinLen
	} else {
		ip := out[ethLen : ethLen+ipv6Len]
		binary.BigEndian.PutUint32(ip[0:], 6<<28)
		binary.BigEndian.PutUint16(ip[4:], uint16(n-ethLen-ipv6Len))
		ip[6], ip[7] = protoUDP, 64
		copy(ip[8:24], s.vtep[1][:])
		copy(ip[24:40], node.vtep[:])
		u = ethLen + ipv6Len
	}
	udp := out[u : u+udpLen+vxlanLen]
	binary.BigEndian.PutUint16(udp[0:], sport)
	if t == TunnelGeneve {
		binary.BigEndian.PutUint16(udp[2:], genevePort)
		binary.BigEndian.PutUint32(udp[8:], etherTypeTEB) // ver 0, no options, not OAM/critical
	} else {
		binary.BigEndian.PutUint16(udp[2:], vxlanPort)
		binary.BigEndian.PutUint32(udp[8:], 0x08000000) // I flag
	}
	binary.BigEndian.PutUint16(udp[4:], uint16(n-u))
	binary.BigEndian.PutUint16(udp[6:], 0)
	binary.BigEndian.PutUint32(udp[12:], vni<<8)
	writeEth(out[u+udpLen+vxlanLen:], &node.innerMAC, &s.innerMAC, innerVer)
	if node.fam == 1 {
		ps := header.PseudoHeaderChecksum(protoUDP, s.vtep[1][:], node.vtep[:], uint16(n-u))
		c := header.ChecksumFold(header.Checksum(out[u:n], ps))
		binary.BigEndian.PutUint16(udp[6:], header.UDPChecksumValue(c))
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
