package gateway

import (
	"github.com/egret-gw/egret/gateway/header"
)

// Which address of a packet a rewrite changes.
const (
	srcSide = 0
	dstSide = 1
)

// writeEth writes the Ethernet header of a frame from src to dst carrying
// an IP packet of version ver.
func writeEth(b []byte, dst, src *[6]byte, ver uint8) {
	e := header.Ethernet(b).Fixed()
	e.SetDstMAC(*dst)
	e.SetSrcMAC(*src)
	if ver == 4 {
		e.SetEtherType(header.EtherTypeIPv4)
	} else {
		e.SetEtherType(header.EtherTypeIPv6)
	}
}

// decTTL decrements the TTL (hop limit) of ip, which the caller has checked
// to be above 1, keeping the IPv4 header checksum right.
func decTTL(ip []byte, ver uint8) {
	if ver == 6 {
		header.IPv6(ip).Fixed().DecHopLimit()
		return
	}
	header.IPv4(ip).Fixed().DecTTL()
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
	var d uint64
	if pk.IPVer == 4 {
		sh, dh := header.IPv4(src).Fixed(), header.IPv4(dst).Fixed()
		nw := [4]byte(a[12:16])
		if side == srcSide {
			d = header.ChecksumDeltaIPv4(sh.SrcAddr(), nw)
			dh.SetSrcAddr(nw)
		} else {
			d = header.ChecksumDeltaIPv4(sh.DstAddr(), nw)
			dh.SetDstAddr(nw)
		}
		ttl := sh.TTL()
		dh.SetTTL(ttl - 1)
		dh.SetChecksum(header.ChecksumApplyDelta(sh.Checksum(), d+header.ChecksumDelta16(uint16(ttl)<<8, uint16(ttl-1)<<8)))
	} else {
		sh, dh := header.IPv6(src).Fixed(), header.IPv6(dst).Fixed()
		old := sh.SrcAddr()
		if side == dstSide {
			old = sh.DstAddr()
		}
		d = header.ChecksumDelta(old[:], a[:])
		dh.SetHopLimit(sh.HopLimit() - 1)
		if side == srcSide {
			dh.SetSrcAddr(*a)
		} else {
			dh.SetDstAddr(*a)
		}
	}
	l4 := pk.L4 - pk.L3
	switch pk.Proto {
	case header.ProtoTCP:
		sh, dh := header.TCP(src[l4:l4+header.TCPMinLen]).Fixed(), header.TCP(dst[l4:l4+header.TCPMinLen]).Fixed()
		if side == srcSide {
			dh.SetChecksum(header.ChecksumApplyDelta(sh.Checksum(), d+header.ChecksumDelta16(sh.SrcPort(), port)))
			dh.SetSrcPort(port)
		} else {
			dh.SetChecksum(header.ChecksumApplyDelta(sh.Checksum(), d+header.ChecksumDelta16(sh.DstPort(), port)))
			dh.SetDstPort(port)
		}
	case header.ProtoUDP:
		sh, dh := header.UDP(src[l4:l4+header.UDPLen]).Fixed(), header.UDP(dst[l4:l4+header.UDPLen]).Fixed()
		old := sh.SrcPort()
		if side == dstSide {
			old = sh.DstPort()
		}
		if c := sh.Checksum(); c != 0 { // 0: IPv4 without checksum
			dh.SetChecksum(header.UDPChecksumValue(header.ChecksumApplyDelta(c, d+header.ChecksumDelta16(old, port))))
		}
		if side == srcSide {
			dh.SetSrcPort(port)
		} else {
			dh.SetDstPort(port)
		}
	case header.ProtoICMPv4:
		if pk.ICMPEcho {
			// No pseudo-header: the address change does not count.
			sh, dh := header.ICMPv4(src[l4:l4+header.ICMPv4MinLen]).Fixed(), header.ICMPv4(dst[l4:l4+header.ICMPv4MinLen]).Fixed()
			dh.SetChecksum(header.ChecksumApplyDelta(sh.Checksum(), header.ChecksumDelta16(sh.Ident(), port)))
			dh.SetIdent(port)
		}
	case header.ProtoICMPv6:
		if pk.ICMPEcho {
			sh, dh := header.ICMPv6(src[l4:l4+header.ICMPv6MinLen]).Fixed(), header.ICMPv6(dst[l4:l4+header.ICMPv6MinLen]).Fixed()
			dh.SetChecksum(header.ChecksumApplyDelta(sh.Checksum(), d+header.ChecksumDelta16(sh.Ident(), port)))
			dh.SetIdent(port)
		}
	}
}
