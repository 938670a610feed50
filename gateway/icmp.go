package gateway

import (
	"encoding/binary"

	"github.com/egret-gw/egret/gateway/header"
)

// ICMP errors the gateway originates towards a pod.
const (
	icmpTimeExceeded = iota // TTL/hop limit reached 0 in transit
	icmpTooBig              // IPv4 frag needed with DF, IPv6 packet too big
)

// Quote limits: RFC 1812 §4.3.2.3 (576-byte datagram) and RFC 4443 §2.4(c)
// (1280-byte IPv6 minimum MTU).
const (
	maxICMPv4Error = 576
	maxICMPv6Error = 1280
)

// icmpToPod answers the pod packet pk with an ICMP error from the
// gateway's router address, encapsulated back to node ni with the tunnel
// type and VNI the packet came with. failed is the drop reason when it
// cannot be sent; beyond the rate limit (icmpPodAllowed) the packet is a
// DropICMPRateLimited drop.
func (w *Worker) icmpToPod(st *installed, pk *Parsed, now int64, ni int32, in, out []byte, kind int, mtu int, failed DropReason) Result {
	snap := st.snap
	f := fam(pk.IPVer)
	if !snap.hasRoute[f] {
		return w.drop(failed)
	}
	node := &snap.nodes[ni]
	if !snap.routes.Lookup(&node.vtep, &w.hop) {
		return w.drop(DropNoRoute)
	}
	hl := encapLen(node.fam)
	quote, ihl, ok := icmpQuote(pk, w.hop.MTU-(hl-ethLen))
	if !ok {
		return w.drop(failed)
	}
	n := hl + ihl + icmpLen + quote
	if n > len(out) {
		return w.drop(DropOutBuffer)
	}
	if !w.icmpPodAllowed(now) {
		return w.drop(DropICMPRateLimited)
	}
	writeICMPError(out[hl:n], in[pk.L3:pk.L3+quote], pk.IPVer, &snap.router[f], &pk.Src, kind, mtu)
	writeEncap(out[:n], node, pk.Tunnel, pk.VNI, &w.hop, pk.IPVer, entropy(&pk.Src, pk.SrcPort, &pk.Dst))
	w.stats.local.Counters[CounterICMPSent]++
	return Result{Verdict: VerdictTx, Ifindex: w.hop.Ifindex, Len: n}
}

// xlateICMPError translates an ICMP error from the outside about a NATed
// packet back to the pod (RFC 5508 §4.2): the outer destination and the
// quoted packet's source address and port (or echo identifier) become the
// pod's, the quoted IPv4 header checksum and the quoted transport checksum
// (when it is within the quote) are updated, and the ICMP checksum is
// recomputed. ip is the copied IP packet; pk describes the original.
func xlateICMPError(ip []byte, pk *Parsed, pod *[16]byte, podPort uint16) {
	l4, e3, e4 := pk.L4-pk.L3, pk.EmbL3-pk.L3, pk.EmbL4-pk.L3
	if pk.IPVer == 4 {
		setAddrV4(ip, ipDst, pod)
	} else {
		copy(ip[24:40], pod[:])
	}
	emb := ip[e3:]
	var old, nw []byte
	if pk.IPVer == 4 {
		old, nw = emb[ipSrc:ipSrc+4], pod[12:16]
	} else {
		old, nw = emb[8:24], pod[:]
	}
	switch pk.EmbProto {
	case protoUDP:
		if c := binary.BigEndian.Uint16(ip[e4+6:]); c != 0 {
			c = header.ChecksumUpdateAddr(c, old, nw)
			c = header.ChecksumUpdate16(c, binary.BigEndian.Uint16(ip[e4:]), podPort)
			binary.BigEndian.PutUint16(ip[e4+6:], header.UDPChecksumValue(c))
		}
		binary.BigEndian.PutUint16(ip[e4:], podPort)
	case protoTCP:
		if e4+18 <= len(ip) {
			c := binary.BigEndian.Uint16(ip[e4+16:])
			c = header.ChecksumUpdateAddr(c, old, nw)
			c = header.ChecksumUpdate16(c, binary.BigEndian.Uint16(ip[e4:]), podPort)
			binary.BigEndian.PutUint16(ip[e4+16:], c)
		}
		binary.BigEndian.PutUint16(ip[e4:], podPort)
	default: // echo request
		c := binary.BigEndian.Uint16(ip[e4+2:])
		if pk.IPVer == 6 {
			c = header.ChecksumUpdateAddr(c, old, nw)
		}
		c = header.ChecksumUpdate16(c, binary.BigEndian.Uint16(ip[e4+4:]), podPort)
		binary.BigEndian.PutUint16(ip[e4+2:], c)
		binary.BigEndian.PutUint16(ip[e4+4:], podPort)
	}
	if pk.IPVer == 4 {
		c := header.ChecksumUpdateAddr(binary.BigEndian.Uint16(emb[10:]), old, nw)
		binary.BigEndian.PutUint16(emb[10:], c)
	}
	copy(old, nw)
	ic := ip[l4:]
	ic[2], ic[3] = 0, 0
	var ps uint32
	if pk.IPVer == 6 {
		ps = header.PseudoHeaderChecksum(protoICMPv6, ip[8:24], ip[24:40], uint16(len(ic)))
	}
	binary.BigEndian.PutUint16(ic[2:], header.ChecksumFold(header.Checksum(ic, ps)))
}

// ICMP errors to the outside are rate limited per worker (RFC 4443 §2.4(f),
// RFC 1812 §4.3.2.8): a token bucket of icmpOutBurst refilled with one
// token every icmpOutEvery nanoseconds.
const (
	icmpOutBurst = 64
	icmpOutEvery = int64(1_000_000) // 1000 per second and worker
)

// icmpOutAllowed takes a token for an ICMP error to the outside.
func (w *Worker) icmpOutAllowed(now int64) bool {
	return w.icmpOut.take(now, icmpOutBurst, icmpOutEvery)
}

// ICMP errors to pods (time exceeded, too big) have a bucket of their own,
// of the same size (RFC 1812 §4.3.2.8, RFC 4443 §2.4(f)): a pod that floods
// the gateway with packets whose TTL runs out, or that are larger than the
// MTU, gets at most this many answers (each one a frame of up to 576 or 1280
// bytes that the gateway builds), and it cannot use up the answers owed to
// the outside, nor the outside use up its.
const (
	icmpPodBurst = 64
	icmpPodEvery = int64(1_000_000) // 1000 per second and worker
)

// icmpPodAllowed takes a token for an ICMP error to a pod.
func (w *Worker) icmpPodAllowed(now int64) bool {
	return w.icmpPod.take(now, icmpPodBurst, icmpPodEvery)
}

// tokenBucket allows burst events at once and one more every `every`
// nanoseconds. The zero value is full on first use.
type tokenBucket struct {
	tokens int64
	last   int64 // when tokens were last added; 0 before first use
}

func (b *tokenBucket) take(now, burst, every int64) bool {
	if b.last == 0 || now-b.last > every*burst { // first use or long idle
		b.tokens, b.last = burst, now
	} else if n := (now - b.last) / every; n > 0 {
		b.tokens = min(b.tokens+n, burst)
		b.last += n * every
	}
	if b.tokens <= 0 {
		return false
	}
	b.tokens--
	return true
}

// tooBigToOutside answers a packet from the outside (pk, to a hosted
// egress IP) that does not fit the tunnel to the pod's node once
// encapsulated: ICMP fragmentation needed (IPv4, DF set) or packet too big
// (IPv6) carrying mtu, the largest packet that fits, from the egress IP it
// was sent to, quoting as much of it as fits in 576 bytes (IPv4, RFC 1812
// §4.3.2.3) or 1280 bytes (IPv6, RFC 4443 §2.4(c)). The server's PMTU
// discovery then lowers its packet size for this destination.
func (w *Worker) tooBigToOutside(st *installed, pk *Parsed, now int64, in, out []byte, mtu int) Result {
	snap := st.snap
	if !snap.routes.Lookup(&pk.Src, &w.hop) {
		return w.drop(DropMTUExceeded)
	}
	if !w.icmpOutAllowed(now) {
		return w.drop(DropMTUExceeded)
	}
	quote, ihl, ok := icmpQuote(pk, w.hop.MTU)
	n := ethLen + ihl + icmpLen + quote
	if !ok || n > len(out) {
		return w.drop(DropMTUExceeded)
	}
	writeEth(out, &w.hop.DstMAC, &w.hop.SrcMAC, pk.IPVer)
	writeICMPError(out[ethLen:n], in[pk.L3:pk.L3+quote], pk.IPVer, &pk.Dst, &pk.Src, icmpTooBig, mtu)
	w.stats.local.Counters[CounterICMPSent]++
	return Result{Verdict: VerdictTx, Ifindex: w.hop.Ifindex, Len: n}
}

// icmpQuote returns how much of pk's IP packet an ICMP error about it quotes
// when the error's IP packet may be at most mtu bytes, and the error's IP
// header length: as much as fits in 576 bytes (IPv4) or 1280 (IPv6). ok is
// false when the quote would not reach the ports, which the sender needs to
// match the error to its socket.
func icmpQuote(pk *Parsed, mtu int) (quote, ihl int, ok bool) {
	ihl, maxLen := ipv4MinLen, maxICMPv4Error
	if pk.IPVer == 6 {
		ihl, maxLen = ipv6Len, maxICMPv6Error
	}
	quote = min(pk.End-pk.L3, maxLen-ihl-icmpLen, mtu-ihl-icmpLen)
	return quote, ihl, quote >= ihl+8
}

// writeICMPError writes into ip, exactly the error's length, an ICMP error
// of kind (carrying mtu for icmpTooBig) from src to dst in an IP packet of
// version ver, quoting quoted.
func writeICMPError(ip, quoted []byte, ver uint8, src, dst *[16]byte, kind, mtu int) {
	ihl := ipv4MinLen
	if ver == 6 {
		ihl = ipv6Len
	}
	ic := ip[ihl:]
	copy(ic[icmpLen:], quoted)
	binary.BigEndian.PutUint32(ic[4:], 0)
	if ver == 4 {
		ip[0], ip[1] = 0x45, 0
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
		binary.BigEndian.PutUint32(ip[4:], 0)
		ip[8], ip[9], ip[10], ip[11] = 64, protoICMP, 0, 0
		copy(ip[12:16], src[12:])
		copy(ip[16:20], dst[12:])
		binary.BigEndian.PutUint16(ip[10:], header.ChecksumFold(header.Checksum(ip[:ipv4MinLen], 0)))
		if kind == icmpTimeExceeded {
			ic[0], ic[1] = icmp4TimeExc, 0
		} else {
			ic[0], ic[1] = icmp4Unreach, 4 // fragmentation needed and DF set
			binary.BigEndian.PutUint16(ic[6:], uint16(mtu))
		}
		ic[2], ic[3] = 0, 0
		binary.BigEndian.PutUint16(ic[2:], header.ChecksumFold(header.Checksum(ic, 0)))
		return
	}
	binary.BigEndian.PutUint32(ip[0:], 6<<28)
	binary.BigEndian.PutUint16(ip[4:], uint16(len(ic)))
	ip[6], ip[7] = protoICMPv6, 64
	copy(ip[8:24], src[:])
	copy(ip[24:40], dst[:])
	if kind == icmpTimeExceeded {
		ic[0], ic[1] = icmp6TimeExc, 0
	} else {
		ic[0], ic[1] = icmp6TooBig, 0
		binary.BigEndian.PutUint32(ic[4:], uint32(mtu))
	}
	ic[2], ic[3] = 0, 0
	ps := header.PseudoHeaderChecksum(protoICMPv6, ip[8:24], ip[24:40], uint16(len(ic)))
	binary.BigEndian.PutUint16(ic[2:], header.ChecksumFold(header.Checksum(ic, ps)))
}
