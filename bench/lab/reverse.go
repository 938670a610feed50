package main

import (
	"encoding/binary"
	"net/netip"

	"github.com/egret-gw/egret/gateway/header"
)

// The other direction: frames the outside sends to the egress IP for the
// pod's flows, as the router would forward them from the server onto the
// fabric (Ethernet from the router's eth0 to the gateway's, IPv4 from the
// server to the egress IP). The gateway translates them back and sends them
// to worker w1 inside VXLAN, where the receiver counts them. IPv4 only: the
// scenarios that use it run on the IPv4 lab.

// Protocol numbers and TCP flags the frames use.
const (
	protoICMP  = 1
	protoTCP   = 6
	protoUDP   = 17
	tcpLen     = 20
	icmpLen    = 8
	tcpSYN     = 0x02
	tcpACK     = 0x10
	fragNeeded = 4 // ICMP destination unreachable, code: fragmentation needed and DF set
)

// back describes the frames from the outside to the gateway for one pod's
// flows: the router's eth0 to the gateway's eth0, the server to the egress
// IP (whose port for a flow is the pod's own: both sides preserve a free
// source port, and every flow's is free).
type back struct {
	srcMAC, dstMAC [6]byte
	server, egress netip.Addr
}

// frameLen pads a frame to size (FCS included) when it is shorter.
func frameLen(n, size int) int { return max(n, size-fcsLen) }

// putEth writes the Ethernet header of a frame from the router to the gateway.
func (bk *back) putEth(b []byte) {
	copy(b[0:6], bk.dstMAC[:])
	copy(b[6:12], bk.srcMAC[:])
}

// putIPv4 writes, from b[12], the EtherType and an IPv4 header from src to
// dst carrying payload bytes of proto.
func putIPv4(b []byte, src, dst netip.Addr, proto uint8, payload int) header.IPv4 {
	binary.BigEndian.PutUint16(b[12:14], 0x0800)
	ip := header.IPv4(b[ethLen : ethLen+20])
	ip.SetHeaderLength(20)
	ip.SetTotalLength(uint16(20 + payload))
	ip.SetFlagsFragmentOffset(header.IPv4FlagDontFragment, 0)
	ip.SetTTL(64)
	ip.SetProtocol(proto)
	ip.SetSrcAddr(src.As4())
	ip.SetDstAddr(dst.As4())
	ip.SetChecksum(header.ChecksumFold(header.Checksum(ip, 0)))
	return ip
}

// buildReply writes the server's UDP answer on flow (to the egress IP and
// the flow's port), with the stamp, padded to size; it returns its length.
func (bk *back) buildReply(b []byte, size int, flow, seq uint64, ts int64) int {
	n := frameLen(ethLen+20+udpLen+stampLen, size)
	clear(b[:n])
	bk.putEth(b)
	putIPv4(b, bk.server, bk.egress, protoUDP, n-ethLen-20)
	sport, dport := flowPorts(flow)
	u := b[ethLen+20 : n]
	binary.BigEndian.PutUint16(u[0:2], dport)
	binary.BigEndian.PutUint16(u[2:4], sport)
	binary.BigEndian.PutUint16(u[4:6], uint16(len(u)))
	binary.BigEndian.PutUint64(u[8:16], seq)
	binary.BigEndian.PutUint64(u[16:24], uint64(ts))
	s, d := bk.server.As4(), bk.egress.As4()
	pseudo := header.PseudoHeaderChecksum(protoUDP, s[:], d[:], uint16(len(u)))
	binary.BigEndian.PutUint16(u[6:8], header.UDPChecksumValue(header.ChecksumFold(header.Checksum(u, pseudo))))
	return n
}

// buildFragNeeded writes the ICMP "fragmentation needed" a router on the
// way to the server would send for one of flow's packets (as the gateway
// sent it: from the egress IP and the flow's port), quoting its IPv4 and
// UDP headers and the stamp; it returns its length.
func (bk *back) buildFragNeeded(b []byte, size int, flow, seq uint64, ts int64) int {
	const quoted = 20 + udpLen + stampLen
	n := frameLen(ethLen+20+icmpLen+quoted, size)
	clear(b[:n])
	bk.putEth(b)
	putIPv4(b, bk.server, bk.egress, protoICMP, n-ethLen-20)
	icmp := b[ethLen+20 : n]
	icmp[0], icmp[1] = 3, fragNeeded
	binary.BigEndian.PutUint16(icmp[6:8], 1280) // next-hop MTU
	q := icmp[icmpLen:]
	// The quoted packet: the egress IP to the server, UDP from the flow's port.
	var inner [ethLen + quoted]byte
	putIPv4(inner[:], bk.egress, bk.server, protoUDP, udpLen+stampLen+64)
	copy(q, inner[ethLen:ethLen+20])
	sport, dport := flowPorts(flow)
	u := q[20:]
	binary.BigEndian.PutUint16(u[0:2], sport)
	binary.BigEndian.PutUint16(u[2:4], dport)
	binary.BigEndian.PutUint16(u[4:6], udpLen+stampLen+64)
	binary.BigEndian.PutUint64(u[8:16], seq)
	binary.BigEndian.PutUint64(u[16:24], uint64(ts))
	binary.BigEndian.PutUint16(icmp[2:4], header.ChecksumFold(header.Checksum(icmp, 0)))
	return n
}

// synSeq is the sequence number of flow's SYN (the SYN-ACK acknowledges it).
func synSeq(flow uint64) uint32 { return uint32(flow*0x9e3779b1) | 1 }

// buildSynAck writes the server's SYN-ACK from its port sport to the
// egress IP's port dport, acknowledging ack (the SYN's sequence number + 1);
// it returns its length (the 64-byte minimum).
func (bk *back) buildSynAck(b []byte, sport, dport uint16, ack uint32) int {
	n := frameLen(ethLen+20+tcpLen, 64)
	clear(b[:n])
	bk.putEth(b)
	putIPv4(b, bk.server, bk.egress, protoTCP, tcpLen)
	putTCP(b[ethLen+20:ethLen+20+tcpLen], sport, dport, ack*0x9e3779b1, ack, tcpSYN|tcpACK, bk.server, bk.egress)
	return n
}

// parseSYN reads a plain Ethernet frame carrying an IPv4 TCP SYN (without
// ACK) from src to one of the generated flows' destination ports: its
// ports and sequence number.
func parseSYN(f []byte, src netip.Addr) (sport, dport uint16, seq uint32, ok bool) {
	if len(f) < ethLen+20+tcpLen || binary.BigEndian.Uint16(f[12:14]) != 0x0800 {
		return 0, 0, 0, false
	}
	ip := f[ethLen:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[9] != protoTCP || ihl < 20 || len(ip) < ihl+tcpLen || !src.Is4() || [4]byte(ip[12:16]) != src.As4() {
		return 0, 0, 0, false
	}
	t := ip[ihl:]
	sport, dport = binary.BigEndian.Uint16(t[0:2]), binary.BigEndian.Uint16(t[2:4])
	if t[13]&(tcpSYN|tcpACK) != tcpSYN || dport < benchPortBase || dport >= benchPortBase+benchPorts {
		return 0, 0, 0, false
	}
	return sport, dport, binary.BigEndian.Uint32(t[4:8]), true
}

// putTCP writes a TCP header without options or payload, its checksum included.
func putTCP(t []byte, sport, dport uint16, seq, ack uint32, flags uint8, src, dst netip.Addr) {
	binary.BigEndian.PutUint16(t[0:2], sport)
	binary.BigEndian.PutUint16(t[2:4], dport)
	binary.BigEndian.PutUint32(t[4:8], seq)
	binary.BigEndian.PutUint32(t[8:12], ack)
	t[12] = tcpLen / 4 << 4
	t[13] = flags
	binary.BigEndian.PutUint16(t[14:16], 64240)
	var pseudo uint32
	if src.Is4() {
		s, d := src.As4(), dst.As4()
		pseudo = header.PseudoHeaderChecksum(protoTCP, s[:], d[:], tcpLen)
	} else {
		s, d := src.As16(), dst.As16()
		pseudo = header.PseudoHeaderChecksum(protoTCP, s[:], d[:], tcpLen)
	}
	binary.BigEndian.PutUint16(t[16:18], header.ChecksumFold(header.Checksum(t[:tcpLen], pseudo)))
}

// parseIn reads a VXLAN frame (over IPv4) arriving at the worker: the
// gateway's translation of the server's UDP answer, or of an ICMP error
// quoting one of the pod's UDP packets. The stamp's src is the inner
// packet's source; ok is false for anything else (a SYN-ACK carries no stamp).
func parseIn(f []byte) (st stamp, ok bool) {
	const outer = ethLen + 20 + udpLen + vxlanLen
	if len(f) < outer+ethLen+20 || binary.BigEndian.Uint16(f[12:14]) != 0x0800 || f[ethLen+9] != protoUDP {
		return st, false
	}
	in := f[outer:]
	if binary.BigEndian.Uint16(in[12:14]) != 0x0800 {
		return st, false
	}
	ip := in[ethLen:]
	ihl := int(ip[0]&0x0f) * 4
	if ihl < 20 || len(ip) < ihl {
		return st, false
	}
	st.src = netip.AddrFrom4([4]byte(ip[12:16]))
	u := ip[ihl:]
	switch ip[9] {
	case protoUDP:
	case protoICMP:
		// The quoted packet's UDP header and stamp.
		if len(u) < icmpLen+20 || u[0] != 3 {
			return st, false
		}
		q := u[icmpLen:]
		qihl := int(q[0]&0x0f) * 4
		if qihl < 20 || len(q) < qihl {
			return st, false
		}
		u = q[qihl:]
	default:
		return st, false
	}
	if len(u) < udpLen+stampLen {
		return st, false
	}
	st.sport = binary.BigEndian.Uint16(u[0:2])
	st.dport = binary.BigEndian.Uint16(u[2:4])
	st.seq = binary.BigEndian.Uint64(u[8:16])
	st.ts = int64(binary.BigEndian.Uint64(u[16:24]))
	return st, true
}

// inStampOffset is where parseIn's frames carry the low byte of the
// sequence number, for the receiver's sample filter: after the outer
// headers and the inner UDP header, or after the ICMP header and the
// quoted IPv4 and UDP headers.
func inStampOffset(icmp bool) uint32 {
	off := uint32(ethLen + 20 + udpLen + vxlanLen + ethLen + 20)
	if icmp {
		off += icmpLen + 20
	}
	return off + udpLen + 7
}
