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

// natRewrite replaces one side's address and port (or ICMP echo identifier)
// of the IP packet ip, whose transport header is at l4, and updates the IP,
// TCP, UDP and ICMP checksums incrementally (RFC 1624).
func natRewrite(ip []byte, ver uint8, l4 int, proto uint8, side int, a *[16]byte, port uint16, echo bool) {
	var old, nw []byte
	if ver == 4 {
		o := ipSrc + 4*side
		old, nw = ip[o:o+4], a[12:16]
	} else {
		o := 8 + 16*side
		old, nw = ip[o:o+16], a[:]
	}
	switch proto {
	case protoTCP:
		po := l4 + 2*side
		c := binary.BigEndian.Uint16(ip[l4+16:])
		c = header.ChecksumUpdateAddr(c, old, nw)
		c = header.ChecksumUpdate16(c, binary.BigEndian.Uint16(ip[po:]), port)
		binary.BigEndian.PutUint16(ip[l4+16:], c)
		binary.BigEndian.PutUint16(ip[po:], port)
	case protoUDP:
		po := l4 + 2*side
		if c := binary.BigEndian.Uint16(ip[l4+6:]); c != 0 {
			c = header.ChecksumUpdateAddr(c, old, nw)
			c = header.ChecksumUpdate16(c, binary.BigEndian.Uint16(ip[po:]), port)
			binary.BigEndian.PutUint16(ip[l4+6:], header.UDPChecksumValue(c))
		}
		binary.BigEndian.PutUint16(ip[po:], port)
	case protoICMP, protoICMPv6:
		if echo {
			c := binary.BigEndian.Uint16(ip[l4+2:])
			if proto == protoICMPv6 {
				c = header.ChecksumUpdateAddr(c, old, nw)
			}
			c = header.ChecksumUpdate16(c, binary.BigEndian.Uint16(ip[l4+4:]), port)
			binary.BigEndian.PutUint16(ip[l4+2:], c)
			binary.BigEndian.PutUint16(ip[l4+4:], port)
		}
	}
	if ver == 4 {
		c := header.ChecksumUpdateAddr(binary.BigEndian.Uint16(ip[10:]), old, nw)
		binary.BigEndian.PutUint16(ip[10:], c)
	}
	copy(old, nw)
}
