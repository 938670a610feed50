package main

import (
	"encoding/binary"
	"net/netip"

	"github.com/egret-gw/egret/gateway/header"
)

// Frame sizes. A size is the pod's frame as the gateway forwards it to the
// outside, FCS included (RFC 2544 counts frames that way); on the fabric it
// travels inside VXLAN, 50 bytes longer over an IPv4 underlay and 70 over
// IPv6. The smallest frame must still carry the stamp, so an IPv6 pod's
// "64-byte" frame is 82 bytes; the largest is what the pod MTU allows.
const (
	fcsLen   = 4
	stampLen = 16 // sequence number, then send time in ns (CLOCK_MONOTONIC), big-endian
	vxlanLen = 8
	udpLen   = 8
	ethLen   = 14
	// benchPortBase is the first destination port of the generated
	// flows; the receiver takes only ports from here to benchPortBase+
	// benchPorts-1, and the router drops them after it has seen them.
	benchPortBase = 20000
	benchPorts    = 10000
	// srcPorts source ports from srcPortBase are the flows' (flowPorts).
	srcPortBase = 1024
	srcPorts    = 50000
)

// imix is the simple IMIX (7:4:1 of 64, 576 and 1500-byte frames).
var imix = []int{64, 64, 64, 64, 64, 64, 64, 576, 576, 576, 576, 1500}

// wire describes the frames one worker sends for one pod: the outer headers
// from the worker's VTEP to the gateway's, and the pod's packet to the
// outside server inside.
type wire struct {
	outerSrcMAC, outerDstMAC [6]byte // worker eth0 → gateway eth0
	outerSrc, outerDst       netip.Addr
	vni                      uint32
	port                     uint16
	innerSrcMAC, innerDstMAC [6]byte // worker tunnel MAC → gateway tunnel MAC
	pod, server              netip.Addr
	podMTU                   int
}

func (w *wire) outerLen() int {
	if w.outerSrc.Is4() {
		return ethLen + 20 + udpLen + vxlanLen
	}
	return ethLen + 40 + udpLen + vxlanLen
}

func (w *wire) innerIPLen() int {
	if w.pod.Is4() {
		return 20
	}
	return 40
}

// innerFrameLen is the inner Ethernet frame (FCS off) for a frame size:
// raised to the smallest that carries the stamp, cut to the pod MTU.
func (w *wire) innerFrameLen(size int) int {
	n := size - fcsLen
	if min := ethLen + w.innerIPLen() + udpLen + stampLen; n < min {
		n = min
	}
	if max := ethLen + w.podMTU; n > max {
		n = max
	}
	return n
}

// flowPorts maps flow i to its source and destination port. The source
// ports skip the tunnel ports (VXLAN 4789, Geneve 6081), which a gateway
// never gives a flow as its NAT port: every flow's port is then free to
// be preserved, and the frames from outside address it (reverse.go).
func flowPorts(i uint64) (sport, dport uint16) {
	p := srcPortBase + i%srcPorts
	if p >= 4789 {
		p++
	}
	if p >= 6081 {
		p++
	}
	return uint16(p), uint16(benchPortBase + (i/srcPorts)%benchPorts)
}

// maxFlows is how many distinct flows one pod can have in this scheme.
const maxFlows = srcPorts * benchPorts

// build writes the VXLAN frame of flow with sequence number seq and send
// time ts into b (which must be zeroed beyond the stamp, as fresh or reused
// buffers of the same size are) and returns its length. Every checksum is
// correct: the inner IPv4 header and UDP, the outer IPv4 header, and the
// outer UDP checksum over IPv6 (zero over IPv4, as Linux VXLAN sends).
func (w *wire) build(b []byte, size int, flow, seq uint64, ts int64) int {
	inner := w.innerFrameLen(size)
	o := w.outerLen()
	total := o + inner
	udpOff, outerPseudo := w.putOuter(b, total, flow)
	sport, dport := flowPorts(flow)
	in := b[o:total]
	iuOff, pseudo := putIPUDP(in[12:], w.pod, w.server)
	iu := in[iuOff:] // inner UDP header and payload
	binary.BigEndian.PutUint16(iu[0:2], sport)
	binary.BigEndian.PutUint16(iu[2:4], dport)
	binary.BigEndian.PutUint16(iu[4:6], uint16(len(iu)))
	binary.BigEndian.PutUint64(iu[8:16], seq)
	binary.BigEndian.PutUint64(iu[16:24], uint64(ts))
	// The rest of the payload is zero and adds nothing to a checksum.
	binary.BigEndian.PutUint16(iu[6:8], header.UDPChecksumValue(header.ChecksumFold(header.Checksum(iu[:udpLen+stampLen], pseudo))))
	if w.outerSrc.Is6() {
		u := b[udpOff:total]
		// Everything past the inner stamp is zero.
		end := o + len(in) - len(iu) + udpLen + stampLen
		binary.BigEndian.PutUint16(u[6:8], header.UDPChecksumValue(header.ChecksumFold(header.Checksum(b[udpOff:end], outerPseudo))))
	}
	return total
}

// putOuter clears b[:total] and writes the Ethernet, IP, UDP and VXLAN
// headers of a tunnel frame of total bytes for flow, and the inner
// Ethernet addresses; it returns where the outer UDP header starts and its
// pseudo-header sum.
func (w *wire) putOuter(b []byte, total int, flow uint64) (udpOff int, pseudo uint32) {
	clear(b[:total])
	copy(b[0:6], w.outerDstMAC[:])
	copy(b[6:12], w.outerSrcMAC[:])
	udpOff, pseudo = putIPUDP(b[12:total], w.outerSrc, w.outerDst)
	// The outer source port carries the flow's entropy, as Linux VXLAN's does.
	h := uint32(flow * 0x9e3779b97f4a7c15 >> 32)
	binary.BigEndian.PutUint16(b[udpOff:], uint16(49152+h%16384))
	binary.BigEndian.PutUint16(b[udpOff+2:], w.port)
	binary.BigEndian.PutUint16(b[udpOff+4:], uint16(total-udpOff))
	vx := b[udpOff+8:]
	vx[0] = 0x08
	binary.BigEndian.PutUint32(vx[4:8], w.vni<<8)
	in := b[w.outerLen():total]
	copy(in[0:6], w.innerDstMAC[:])
	copy(in[6:12], w.innerSrcMAC[:])
	return udpOff, pseudo
}

// buildSYN writes the VXLAN frame of flow's opening SYN (no payload, so no
// stamp; the inner frame padded to the smallest with a stamp) and returns
// its length. Over IPv6 the outer UDP checksum is computed.
func (w *wire) buildSYN(b []byte, size int, flow, _ uint64, _ int64) int {
	inner := w.innerFrameLen(size)
	o := w.outerLen()
	total := o + inner
	udpOff, outerPseudo := w.putOuter(b, total, flow)
	in := b[o:total]
	thOff, _ := putIPUDP(in[12:], w.pod, w.server)
	ipLen := thOff - ethLen + tcpLen
	// putIPUDP wrote a UDP datagram filling the frame: make it TCP, and
	// only as long as its header (the rest is Ethernet padding).
	if w.pod.Is4() {
		ip := header.IPv4(in[ethLen : ethLen+20])
		ip.SetProtocol(protoTCP)
		ip.SetTotalLength(uint16(ipLen))
		ip.SetChecksum(0)
		ip.SetChecksum(header.ChecksumFold(header.Checksum(ip, 0)))
	} else {
		ip := header.IPv6(in[ethLen : ethLen+40])
		ip.SetNextHeader(protoTCP)
		ip.SetPayloadLength(tcpLen)
	}
	sport, dport := flowPorts(flow)
	putTCP(in[thOff:thOff+tcpLen], sport, dport, synSeq(flow), 0, tcpSYN, w.pod, w.server)
	if w.outerSrc.Is6() {
		binary.BigEndian.PutUint16(b[udpOff+6:udpOff+8], header.UDPChecksumValue(header.ChecksumFold(header.Checksum(b[udpOff:total], outerPseudo))))
	}
	return total
}

// putIPUDP writes, from b[0], the EtherType and an IPv4 or IPv6 header
// (TTL 64, don't fragment) from src to dst for a UDP datagram filling the
// rest of b. It returns where the UDP header starts, counted from the
// frame's start (b[0] is the EtherType at frame offset 12), and the UDP
// pseudo-header sum.
func putIPUDP(b []byte, src, dst netip.Addr) (udpOff int, pseudo uint32) {
	if src.Is4() {
		binary.BigEndian.PutUint16(b, 0x0800)
		ip := header.IPv4(b[2 : 2+20])
		ip.SetHeaderLength(20)
		ip.SetTotalLength(uint16(len(b) - 2))
		ip.SetFlagsFragmentOffset(header.IPv4FlagDontFragment, 0)
		ip.SetTTL(64)
		ip.SetProtocol(17)
		s, d := src.As4(), dst.As4()
		ip.SetSrcAddr(s)
		ip.SetDstAddr(d)
		ip.SetChecksum(header.ChecksumFold(header.Checksum(ip, 0)))
		return ethLen + 20, header.PseudoHeaderChecksum(17, s[:], d[:], uint16(len(b)-2-20))
	}
	binary.BigEndian.PutUint16(b, 0x86dd)
	ip := header.IPv6(b[2 : 2+40])
	ip.SetVersionTrafficClassFlowLabel(0, 0)
	ip.SetPayloadLength(uint16(len(b) - 2 - 40))
	ip.SetNextHeader(17)
	ip.SetHopLimit(64)
	s, d := src.As16(), dst.As16()
	ip.SetSrcAddr(s)
	ip.SetDstAddr(d)
	return ethLen + 40, header.PseudoHeaderChecksum(17, s[:], d[:], uint16(len(b)-2-40))
}

// stamp is what the receiver reads from a frame leaving the gateway.
type stamp struct {
	src   netip.Addr // the source address the gateway gave the packet
	sport uint16
	dport uint16
	seq   uint64
	ts    int64
}

// parseOut reads a plain (not encapsulated) Ethernet frame carrying one of
// the generator's UDP packets; ok is false for anything else.
func parseOut(f []byte) (st stamp, ok bool) {
	if len(f) < ethLen+20 {
		return st, false
	}
	var u []byte
	switch binary.BigEndian.Uint16(f[12:14]) {
	case 0x0800:
		ip := f[ethLen:]
		ihl := int(ip[0]&0x0f) * 4
		if ip[9] != 17 || ihl < 20 || len(ip) < ihl+udpLen+stampLen {
			return st, false
		}
		st.src = netip.AddrFrom4([4]byte(ip[12:16]))
		u = ip[ihl:]
	case 0x86dd:
		ip := f[ethLen:]
		if len(ip) < 40+udpLen+stampLen || ip[6] != 17 {
			return st, false
		}
		st.src = netip.AddrFrom16([16]byte(ip[8:24]))
		u = ip[40:]
	default:
		return st, false
	}
	st.sport = binary.BigEndian.Uint16(u[0:2])
	st.dport = binary.BigEndian.Uint16(u[2:4])
	if st.dport < benchPortBase || st.dport >= benchPortBase+benchPorts {
		return st, false
	}
	st.seq = binary.BigEndian.Uint64(u[8:16])
	st.ts = int64(binary.BigEndian.Uint64(u[16:24]))
	return st, true
}
