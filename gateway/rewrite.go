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

// rewriteNAT copies the IP packet src (decoded as pk) into dst, of the
// same length, decrementing the TTL (hop limit, checked above 1 by the
// caller) and replacing one side's address and port (or ICMP echo
// identifier). The IP, TCP, UDP and ICMP checksums are updated
// incrementally (RFC 1624) with the address difference computed once, and
// the IPv4 header's with the TTL change folded into the same sum. Every old
// value is read from src, never from dst just after the copy wrote it, so
// no load waits on those stores.
func rewriteNAT(dst, src []byte, pk *Parsed, side int, a *[16]byte, port uint16) {
	copy(dst, src)
	side &= 1
	var d uint64
	if pk.IPVer == 4 {
		sh := (*[ipv4MinLen]byte)(src[:ipv4MinLen])
		dh := (*[ipv4MinLen]byte)(dst[:ipv4MinLen])
		o := ipSrc + 4*side
		nw := binary.BigEndian.Uint32(a[12:16])
		d = uint64(^binary.BigEndian.Uint32(sh[o:o+4])) + uint64(nw)
		ttl := binary.BigEndian.Uint16(sh[8:10])
		nttl := ttl - 0x0100
		ipd := d + uint64(^ttl) + uint64(nttl)
		binary.BigEndian.PutUint16(dh[8:10], nttl)
		binary.BigEndian.PutUint16(dh[10:12], csumApply(binary.BigEndian.Uint16(sh[10:12]), ipd))
		binary.BigEndian.PutUint32(dh[o:o+4], nw)
	} else {
		sh := (*[ipv6Len]byte)(src[:ipv6Len])
		dh := (*[ipv6Len]byte)(dst[:ipv6Len])
		o := 8 + 16*side
		d = csumDelta(sh[o:o+16], a[:])
		dh[7] = sh[7] - 1
		copy(dh[o:o+16], a[:])
	}
	l4 := pk.L4 - pk.L3
	switch pk.Proto {
	case protoTCP:
		sh := (*[tcpMinLen]byte)(src[l4 : l4+tcpMinLen])
		dh := (*[tcpMinLen]byte)(dst[l4 : l4+tcpMinLen])
		po := 2 * side
		pd := d + uint64(^binary.BigEndian.Uint16(sh[po:po+2])) + uint64(port)
		binary.BigEndian.PutUint16(dh[16:18], csumApply(binary.BigEndian.Uint16(sh[16:18]), pd))
		binary.BigEndian.PutUint16(dh[po:po+2], port)
	case protoUDP:
		sh := (*[udpLen]byte)(src[l4 : l4+udpLen])
		dh := (*[udpLen]byte)(dst[l4 : l4+udpLen])
		po := 2 * side
		if c := binary.BigEndian.Uint16(sh[6:8]); c != 0 {
			pd := d + uint64(^binary.BigEndian.Uint16(sh[po:po+2])) + uint64(port)
			binary.BigEndian.PutUint16(dh[6:8], header.UDPChecksumValue(csumApply(c, pd)))
		}
		binary.BigEndian.PutUint16(dh[po:po+2], port)
	case protoICMP, protoICMPv6:
		if pk.ICMPEcho {
			sh := (*[icmpLen]byte)(src[l4 : l4+icmpLen])
			dh := (*[icmpLen]byte)(dst[l4 : l4+icmpLen])
			pd := uint64(^binary.BigEndian.Uint16(sh[4:6])) + uint64(port)
			if pk.Proto == protoICMPv6 {
				pd += d
			}
			binary.BigEndian.PutUint16(dh[2:4], csumApply(binary.BigEndian.Uint16(sh[2:4]), pd))
			binary.BigEndian.PutUint16(dh[4:6], port)
		}
	}
}
