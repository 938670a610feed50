package gateway

import (
	"encoding/binary"

	"github.com/egret-gw/egret/gateway/header"
)

// Which address of a packet a rewrite changes.
const (
	srcSide = 0
	dstSide = 1
)

// Offsets of the IPv4 source and destination addresses.
const (
	ipSrc = 12
	ipDst = 16
)

func writeEth(b []byte, dst, src *[6]byte, ver uint8) {
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	if ver == 4 {
		binary.BigEndian.PutUint16(b[12:], etherTypeIPv4)
	} else {
		binary.BigEndian.PutUint16(b[12:], etherTypeIPv6)
	}
}

// decTTL decrements the TTL (hop limit) of ip, which the caller has checked
// to be above 1, keeping the IPv4 header checksum right (RFC 1624).
func decTTL(ip []byte, ver uint8) {
	if ver == 6 {
		ip[7]--
		return
	}
	// Compute the new TTL/protocol word from the old one rather than reading
	// it back after a byte store (that stalls store-to-load forwarding).
	old := binary.BigEndian.Uint16(ip[8:])
	nw := old - 0x0100
	binary.BigEndian.PutUint16(ip[8:], nw)
	binary.BigEndian.PutUint16(ip[10:], header.ChecksumUpdate16(binary.BigEndian.Uint16(ip[10:]), old, nw))
}

// setAddrV4 replaces the IPv4 address at off (ipSrc or ipDst) and fixes the
// header checksum only: for a later fragment there is no transport header.
func setAddrV4(ip []byte, off int, a *[16]byte) {
	c := header.ChecksumUpdateAddr(binary.BigEndian.Uint16(ip[10:]), ip[off:off+4], a[12:16])
	binary.BigEndian.PutUint16(ip[10:], c)
	copy(ip[off:off+4], a[12:16])
}

// csumDelta is the one's-complement difference (RFC 1624: ~m + m') of a
// field changing from old to nw, summed as 32-bit words (equal length,
// a multiple of 4), to be applied to every checksum covering the field.
func csumDelta(old, nw []byte) uint64 {
	var d uint64
	for i := 0; i+4 <= len(old); i += 4 {
		d += uint64(^binary.BigEndian.Uint32(old[i:])) + uint64(binary.BigEndian.Uint32(nw[i:]))
	}
	return d
}

// csumApply returns checksum field c updated by delta d (RFC 1624 eqn. 3).
func csumApply(c uint16, d uint64) uint16 {
	s := uint64(^c) + d
	s = s>>32 + s&0xffffffff
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	s = s>>16 + s&0xffff
	return ^uint16(s)
}

// natRewrite replaces one side's address and port (or ICMP echo identifier)
// of the IP packet ip, whose transport header is at l4, and updates the IP,
// TCP, UDP and ICMP checksums incrementally (RFC 1624), computing the
// address difference once for all of them.
func natRewrite(ip []byte, ver uint8, l4 int, proto uint8, side int, a *[16]byte, port uint16, echo bool) {
	var old, nw []byte
	if ver == 4 {
		o := ipSrc + 4*side
		old, nw = ip[o:o+4], a[12:16]
	} else {
		o := 8 + 16*side
		old, nw = ip[o:o+16], a[:]
	}
	d := csumDelta(old, nw)
	switch proto {
	case protoTCP:
		po := l4 + 2*side
		pd := d + uint64(^binary.BigEndian.Uint16(ip[po:])) + uint64(port)
		binary.BigEndian.PutUint16(ip[l4+16:], csumApply(binary.BigEndian.Uint16(ip[l4+16:]), pd))
		binary.BigEndian.PutUint16(ip[po:], port)
	case protoUDP:
		po := l4 + 2*side
		if c := binary.BigEndian.Uint16(ip[l4+6:]); c != 0 {
			pd := d + uint64(^binary.BigEndian.Uint16(ip[po:])) + uint64(port)
			binary.BigEndian.PutUint16(ip[l4+6:], header.UDPChecksumValue(csumApply(c, pd)))
		}
		binary.BigEndian.PutUint16(ip[po:], port)
	case protoICMP, protoICMPv6:
		if echo {
			pd := uint64(^binary.BigEndian.Uint16(ip[l4+4:])) + uint64(port)
			if proto == protoICMPv6 {
				pd += d
			}
			binary.BigEndian.PutUint16(ip[l4+2:], csumApply(binary.BigEndian.Uint16(ip[l4+2:]), pd))
			binary.BigEndian.PutUint16(ip[l4+4:], port)
		}
	}
	if ver == 4 {
		binary.BigEndian.PutUint16(ip[10:], csumApply(binary.BigEndian.Uint16(ip[10:]), d))
	}
	copy(old, nw)
}
