package gateway

import (
	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/route"
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
func (pr *Processor) icmpToPod(st *installed, pk *Parsed, now int64, ni int32, in, out []byte, kind int, mtu int, failed DropReason) Result {
	snap := st.snap
	f := fam(pk.IPVer)
	if !snap.hasRoute[f] {
		return pr.drop(failed)
	}
	node := &snap.nodes[ni]
	if snap.routes.Lookup(&node.vtep, &pr.hop) != route.Found {
		return pr.drop(DropNoRoute)
	}
	hl := encapLen(node.fam)
	quote, ihl, ok := icmpQuote(pk, pr.hop.MTU-(hl-header.EthernetLen))
	if !ok {
		return pr.drop(failed)
	}
	n := hl + ihl + icmpLen + quote
	if n > len(out) {
		return pr.drop(DropOutBuffer)
	}
	if !pr.icmpPodAllowed(now) {
		return pr.drop(DropICMPRateLimited)
	}
	writeICMPError(out[hl:n], in[pk.L3:pk.L3+quote], pk.IPVer, &snap.router[f], &pk.Src, kind, mtu)
	writeEncap(out[:n], node, pk.Tunnel, pk.VNI, &pr.hop, pk.IPVer, entropy(&pk.Src, pk.SrcPort, &pk.Dst))
	pr.stats.local.Counters[CounterICMPSent]++
	return Result{Verdict: VerdictTx, Ifindex: pr.hop.Ifindex, Len: n}
}

// xlateICMPError translates an ICMP error from the outside about a NATed
// packet back to the pod (RFC 5508 §4.2): the outer destination and the
// quoted packet's source address and port (or echo identifier) become the
// pod's, the quoted IPv4 header checksum and the quoted transport checksum
// (when it is within the quote) are updated, and the ICMP checksum is
// recomputed. ip is the copied IP packet; pk describes the original.
func xlateICMPError(ip []byte, pk *Parsed, pod *[16]byte, podPort uint16) {
	l4, e3, e4 := pk.L4-pk.L3, pk.EmbL3-pk.L3, pk.EmbL4-pk.L3
	emb := ip[e3:]
	// The quoted source address (the egress IP) as it was, and the pod's.
	var old4 [4]byte
	var old6 [16]byte
	var old, nw []byte
	if pk.IPVer == 4 {
		header.IPv4(ip).Fixed().SetDstAddrWithChecksumUpdate([4]byte(pod[12:16]))
		old4 = header.IPv4(emb).Fixed().SrcAddr()
		old, nw = old4[:], pod[12:16]
	} else {
		header.IPv6(ip).Fixed().SetDstAddr(*pod)
		old6 = header.IPv6(emb).Fixed().SrcAddr()
		old, nw = old6[:], pod[:]
	}
	q := ip[e4:] // the quoted transport header: at least 8 bytes
	switch pk.EmbProto {
	case header.ProtoUDP:
		u := header.UDP(q).Fixed()
		if c := u.Checksum(); c != 0 {
			c = header.ChecksumUpdateAddr(c, old, nw)
			c = header.ChecksumUpdate16(c, u.SrcPort(), podPort)
			u.SetChecksum(header.UDPChecksumValue(c))
		}
		u.SetSrcPort(podPort)
	case header.ProtoTCP:
		t := header.TCP(q)
		if len(q) >= header.TCPMinLen-2 { // the checksum is within the quote
			c := t.Checksum()
			c = header.ChecksumUpdateAddr(c, old, nw)
			c = header.ChecksumUpdate16(c, t.SrcPort(), podPort)
			t.SetChecksum(c)
		}
		t.SetSrcPort(podPort)
	case header.ProtoICMPv4: // echo request
		e := header.ICMPv4(q).Fixed()
		e.SetChecksum(header.ChecksumUpdate16(e.Checksum(), e.Ident(), podPort))
		e.SetIdent(podPort)
	default: // ICMPv6 echo request: its checksum covers the pseudo-header
		e := header.ICMPv6(q).Fixed()
		e.SetChecksum(header.ChecksumUpdate16(header.ChecksumUpdateAddr(e.Checksum(), old, nw), e.Ident(), podPort))
		e.SetIdent(podPort)
	}
	if pk.IPVer == 4 {
		header.IPv4(emb).Fixed().SetSrcAddrWithChecksumUpdate([4]byte(nw))
		ic := header.ICMPv4(ip[l4:])
		ic.SetChecksum(ic.CalculateChecksum())
		return
	}
	header.IPv6(emb).Fixed().SetSrcAddr(*pod)
	ic := header.ICMPv6(ip[l4:])
	ic.SetChecksum(ic.CalculateChecksum(header.IPv6(ip).Fixed().PseudoHeaderChecksum(header.ProtoICMPv6, uint16(len(ic)))))
}

// ICMP errors to the outside are rate limited per processor (RFC 4443 §2.4(f),
// RFC 1812 §4.3.2.8): a token bucket of icmpOutBurst refilled with one
// token every icmpOutEvery nanoseconds.
const (
	icmpOutBurst = 64
	icmpOutEvery = int64(1_000_000) // 1000 per second and processor
)

// icmpOutAllowed takes a token for an ICMP error to the outside.
func (pr *Processor) icmpOutAllowed(now int64) bool {
	return pr.icmpOut.take(now, icmpOutBurst, icmpOutEvery)
}

// ICMP errors to pods (time exceeded, too big) have a bucket of their own,
// of the same size (RFC 1812 §4.3.2.8, RFC 4443 §2.4(f)): a pod that floods
// the gateway with packets whose TTL runs out, or that are larger than the
// MTU, gets at most this many answers (each one a frame of up to 576 or 1280
// bytes that the gateway builds), and it cannot use up the answers owed to
// the outside, nor the outside use up its.
const (
	icmpPodBurst = 64
	icmpPodEvery = int64(1_000_000) // 1000 per second and processor
)

// icmpPodAllowed takes a token for an ICMP error to a pod.
func (pr *Processor) icmpPodAllowed(now int64) bool {
	return pr.icmpPod.take(now, icmpPodBurst, icmpPodEvery)
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
func (pr *Processor) tooBigToOutside(st *installed, pk *Parsed, now int64, in, out []byte, mtu int) Result {
	snap := st.snap
	if snap.routes.Lookup(&pk.Src, &pr.hop) != route.Found {
		return pr.drop(DropMTUExceeded)
	}
	if !pr.icmpOutAllowed(now) {
		return pr.drop(DropMTUExceeded)
	}
	quote, ihl, ok := icmpQuote(pk, pr.hop.MTU)
	n := header.EthernetLen + ihl + icmpLen + quote
	if !ok || n > len(out) {
		return pr.drop(DropMTUExceeded)
	}
	writeEth(out, &pr.hop.DstMAC, &pr.hop.SrcMAC, pk.IPVer)
	writeICMPError(out[header.EthernetLen:n], in[pk.L3:pk.L3+quote], pk.IPVer, &pk.Dst, &pk.Src, icmpTooBig, mtu)
	pr.stats.local.Counters[CounterICMPSent]++
	return Result{Verdict: VerdictTx, Ifindex: pr.hop.Ifindex, Len: n}
}

// icmpQuote returns how much of pk's IP packet an ICMP error about it quotes
// when the error's IP packet may be at most mtu bytes, and the error's IP
// header length: as much as fits in 576 bytes (IPv4) or 1280 (IPv6). ok is
// false when the quote would not reach the ports, which the sender needs to
// match the error to its socket.
func icmpQuote(pk *Parsed, mtu int) (quote, ihl int, ok bool) {
	ihl, maxLen := header.IPv4MinLen, maxICMPv4Error
	if pk.IPVer == 6 {
		ihl, maxLen = header.IPv6Len, maxICMPv6Error
	}
	quote = min(pk.End-pk.L3, maxLen-ihl-icmpLen, mtu-ihl-icmpLen)
	return quote, ihl, quote >= ihl+8
}

// icmpLen is the length of the ICMP header, the same for ICMPv4 and ICMPv6.
const icmpLen = header.ICMPv4MinLen

// writeICMPError writes into ip, exactly the error's length, an ICMP error
// of kind (carrying mtu for icmpTooBig) from src to dst in an IP packet of
// version ver, quoting quoted.
func writeICMPError(ip, quoted []byte, ver uint8, src, dst *[16]byte, kind, mtu int) {
	if ver == 4 {
		h := header.IPv4(ip).Fixed()
		ic := header.ICMPv4(ip[header.IPv4MinLen:])
		copy(ic[icmpLen:], quoted)
		h.Encode(&header.IPv4Fields{
			TotalLength: uint16(len(ip)),
			TTL:         64,
			Protocol:    header.ProtoICMPv4,
			SrcAddr:     [4]byte(src[12:]),
			DstAddr:     [4]byte(dst[12:]),
		})
		h.SetChecksum(h.CalculateChecksum())
		f := header.ICMPFields{Type: header.ICMPv4TimeExceeded, Code: header.ICMPv4TTLExceeded}
		if kind != icmpTimeExceeded {
			// The next-hop MTU is the low half of the second word (RFC 1191).
			f = header.ICMPFields{Type: header.ICMPv4DstUnreachable, Code: header.ICMPv4FragNeeded, Rest: uint32(uint16(mtu))}
		}
		ic.Encode(&f)
		ic.SetChecksum(ic.CalculateChecksum())
		return
	}
	h := header.IPv6(ip).Fixed()
	ic := header.ICMPv6(ip[header.IPv6Len:])
	copy(ic[icmpLen:], quoted)
	h.Encode(&header.IPv6Fields{
		PayloadLength: uint16(len(ic)),
		NextHeader:    header.ProtoICMPv6,
		HopLimit:      64,
		SrcAddr:       *src,
		DstAddr:       *dst,
	})
	f := header.ICMPFields{Type: header.ICMPv6TimeExceeded, Code: header.ICMPv6HopLimitExceeded}
	if kind != icmpTimeExceeded {
		f = header.ICMPFields{Type: header.ICMPv6PacketTooBig, Rest: uint32(mtu)}
	}
	ic.Encode(&f)
	ic.SetChecksum(ic.CalculateChecksum(h.PseudoHeaderChecksum(header.ProtoICMPv6, uint16(len(ic)))))
}
