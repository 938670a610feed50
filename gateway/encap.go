package gateway

import (
	"encoding/binary"

	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/route"
)

// encapLen is the header length in front of an encapsulated inner IP packet:
// outer Ethernet, outer IP of family f, UDP, VXLAN or Geneve (without
// options; both are 8 bytes) and the inner Ethernet header.
func encapLen(f uint8) int {
	if f == 0 {
		return header.EthernetLen + header.IPv4MinLen + tunnelLen
	}
	return header.EthernetLen + header.IPv6Len + tunnelLen
}

// tunnelLen is what follows the outer IP header: UDP, VXLAN or Geneve
// without options, and the inner Ethernet header.
const tunnelLen = header.UDPLen + header.VXLANLen + header.EthernetLen

// encapMax is the longest encapsulation after the outer Ethernet header:
// outer IPv6, UDP, VXLAN or Geneve, inner Ethernet.
const encapMax = header.IPv6Len + tunnelLen

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
		ip := header.IPv4(h).Fixed()
		ip.Encode(&header.IPv4Fields{
			Flags:    header.IPv4FlagDontFragment,
			TTL:      64,
			Protocol: header.ProtoUDP,
			SrcAddr:  [4]byte(gwVTEP[12:]),
			DstAddr:  [4]byte(vtep[12:]),
		})
		t.sum = header.Checksum(ip, 0)
		u = header.IPv4MinLen
	} else {
		header.IPv6(h).Encode(&header.IPv6Fields{
			NextHeader: header.ProtoUDP,
			HopLimit:   64,
			SrcAddr:    *gwVTEP,
			DstAddr:    *vtep,
		})
		t.sum = header.PseudoHeaderChecksum(header.ProtoUDP, gwVTEP[:], vtep[:], 0)
		u = header.IPv6Len
	}
	// The inner EtherType is the packet's: writeEncap sets it.
	header.Ethernet(h[u+header.UDPLen+header.VXLANLen:]).Encode(&header.EthernetFields{DstMAC: *nodeMAC, SrcMAC: *gwMAC})
	return t
}

// writeEncap fills the encapsulation headers in front of the inner IP packet
// already at out[encapLen(node.fam):], addressed to node with tunnel type t
// and VNI vni: the next hop's Ethernet header, then the node's template and
// the per-packet fields (lengths, outer IPv4 header checksum from the
// template's sum, UDP source port, tunnel type, VNI, inner EtherType). The
// outer UDP checksum is 0 over IPv4 and computed over IPv6 (RFC 8200 §8.1;
// Linux VXLAN devices reject zero checksums over IPv6 by default).
func writeEncap(out []byte, node *snapNode, t Tunnel, vni uint32, hop *route.Hop, innerVer uint8, sport uint16) {
	const ethLen = header.EthernetLen
	n := len(out)
	hl := encapLen(node.fam)
	copy(out[ethLen:hl], node.encap.hdr[:hl-ethLen])
	writeEth(out, &hop.DstMAC, &hop.SrcMAC, 4+2*node.fam)
	u := ethLen + header.IPv4MinLen
	if node.fam == 0 {
		ip := header.IPv4(out[ethLen : ethLen+header.IPv4MinLen]).Fixed()
		tl := uint16(n - ethLen)
		ip.SetTotalLength(tl)
		ip.SetChecksum(header.ChecksumFold(node.encap.sum + uint32(tl)))
	} else {
		u = ethLen + header.IPv6Len
		header.IPv6(out[ethLen : ethLen+header.IPv6Len]).Fixed().SetPayloadLength(uint16(n - u))
	}
	udp := header.UDP(out[u : u+header.UDPLen]).Fixed()
	udp.SetSrcPort(sport)
	tun := out[u+header.UDPLen : u+tunnelLen]
	if t == TunnelGeneve {
		udp.SetDstPort(header.GenevePort)
		header.Geneve(tun).Fixed().Init(vni)
	} else {
		udp.SetDstPort(header.VXLANPort)
		header.VXLAN(tun).Fixed().Init(vni)
	}
	udp.SetLength(uint16(n - u))
	inner := header.Ethernet(tun[header.VXLANLen:]).Fixed()
	if innerVer == 4 {
		inner.SetEtherType(header.EtherTypeIPv4)
	} else {
		inner.SetEtherType(header.EtherTypeIPv6)
	}
	if node.fam == 1 {
		c := header.ChecksumFold(header.Checksum(out[u:n], node.encap.sum+uint32(n-u)))
		udp.SetChecksum(header.UDPChecksumValue(c))
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
