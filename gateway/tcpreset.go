package gateway

import (
	"hash/maphash"

	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/route"
)

// RSTs to pods for TCP segments of flows the gateway does not know are rate
// limited twice, with the token buckets of the ICMP errors: per processor
// (tcpResetBurst, one more every tcpResetEvery) so that a restart with
// thousands of stranded connections costs bounded work, and per source pod
// (tcpResetSrcBurst, one more every tcpResetSrcEvery, buckets shared by the
// pods whose keyed hash collides) so that one pod cannot use up the answers
// owed to the others. Once over the limit a segment is only dropped: the pod
// retransmits, and a later segment gets its RST.
const (
	tcpResetBurst    = 256
	tcpResetEvery    = int64(200_000) // 5000 per second and processor
	tcpResetSrcBurst = 32
	tcpResetSrcEvery = int64(10_000_000) // 100 per second and source
	tcpResetSrcSlots = 256               // per-source buckets per processor (4 KiB)
)

// tcpResetLimiter holds the RST token buckets of one processor: fixed
// arrays, so nothing is allocated per RST.
type tcpResetLimiter struct {
	all  tokenBucket
	seed maphash.Seed
	srcs [tcpResetSrcSlots]tokenBucket
}

func (l *tcpResetLimiter) init() { l.seed = maphash.MakeSeed() }

// allowed takes a token for an RST to the pod at src: from src's bucket and
// the processor's. A source over its own limit does not use up a token of
// the processor's bucket.
func (l *tcpResetLimiter) allowed(src *[16]byte, now int64) bool {
	return l.srcs[l.slot(src)].take(now, tcpResetSrcBurst, tcpResetSrcEvery) && l.all.take(now, tcpResetBurst, tcpResetEvery)
}

// slot is the index of src's bucket: a keyed hash, so that no pod can
// choose addresses sharing another pod's bucket.
func (l *tcpResetLimiter) slot(src *[16]byte) int {
	return int(maphash.Bytes(l.seed, src[:]) % tcpResetSrcSlots)
}

// tcpResetLen is the length of an RST's IP packet: an IP header without
// options and a TCP header without options.
func tcpResetLen(ver uint8) int {
	if ver == 4 {
		return header.IPv4MinLen + header.TCPMinLen
	}
	return header.IPv6Len + header.TCPMinLen
}

// resetToPod answers the TCP segment pk, from a pod of node ni and of no
// flow the gateway holds, with an RST from its destination, encapsulated
// back to the node with the tunnel type and VNI the segment came with, as a
// reply of the flow would be. The pod's connection then fails at once
// (ECONNRESET) instead of retransmitting into silence until its timeout;
// this is what the destination itself would answer for a connection it does
// not know (RFC 9293 §3.10.7.1), and what a gateway restart leaves every
// pod's connections as. The segment is counted as tcp_no_flow whatever
// happens; the RST also as tcp_resets_sent. No RST answers an RST (RFC 9293
// §3.10.7.1), nor a fragment (its length is not known), nor a segment over the rate
// limit (tcpResetLimiter).
func (pr *Processor) resetToPod(st *installed, s *frame, now int64) Result {
	pk, out := &s.pk, s.out
	// A fragment's SEG.LEN is unknown here, and an RST is never answered.
	if pk.Frag || pk.TCPFlags&header.TCPFlagRST != 0 {
		return pr.drop(DropTCPNoFlow)
	}
	node := &st.snap.nodes[s.ni]
	if st.snap.routes.Lookup(&node.vtep, &pr.hop) != route.Found {
		return pr.drop(DropTCPNoFlow)
	}
	hl := encapLen(node.fam)
	n := hl + tcpResetLen(pk.IPVer)
	if n > len(out) {
		return pr.drop(DropTCPNoFlow)
	}
	if !pr.resets.allowed(&pk.Src, now) {
		return pr.drop(DropTCPNoFlow)
	}
	writeTCPReset(out[hl:n], pk)
	writeEncap(out[:n], node, pk.Tunnel, pk.VNI, &pr.hop, pk.IPVer, entropy(&pk.Src, pk.SrcPort, &pk.Dst))
	pr.stats.local.Drops[DropTCPNoFlow]++
	pr.stats.local.Counters[CounterTCPResetsSent]++
	return Result{Verdict: VerdictTx, Ifindex: pr.hop.Ifindex, Len: n}
}

// writeTCPReset writes into ip, exactly tcpResetLen(pk.IPVer) bytes, the
// RST answering segment pk, with pk's addresses and ports swapped (RFC 9293
// §3.10.7.1, reset generation): if the segment has ACK, the RST's sequence
// number is the segment's acknowledgment number and it has no ACK;
// otherwise its sequence number is 0 and it acknowledges the whole segment
// (SEG.SEQ + SEG.LEN, where SYN and FIN count one each).
func writeTCPReset(ip []byte, pk *Parsed) {
	ihl := header.IPv4MinLen
	var pseudo uint32
	if pk.IPVer == 4 {
		h := header.IPv4(ip).Fixed()
		h.Encode(&header.IPv4Fields{
			TotalLength: uint16(len(ip)),
			Flags:       header.IPv4FlagDontFragment,
			TTL:         64,
			Protocol:    header.ProtoTCP,
			SrcAddr:     [4]byte(pk.Dst[12:]),
			DstAddr:     [4]byte(pk.Src[12:]),
		})
		h.SetChecksum(h.CalculateChecksum())
		pseudo = header.PseudoHeaderChecksum(header.ProtoTCP, pk.Dst[12:], pk.Src[12:], header.TCPMinLen)
	} else {
		ihl = header.IPv6Len
		header.IPv6(ip).Encode(&header.IPv6Fields{
			PayloadLength: header.TCPMinLen,
			NextHeader:    header.ProtoTCP,
			HopLimit:      64,
			SrcAddr:       pk.Dst,
			DstAddr:       pk.Src,
		})
		pseudo = header.PseudoHeaderChecksum(header.ProtoTCP, pk.Dst[:], pk.Src[:], header.TCPMinLen)
	}
	f := header.TCPFields{SrcPort: pk.DstPort, DstPort: pk.SrcPort, DataOffset: header.TCPMinLen}
	if pk.TCPFlags&header.TCPFlagACK != 0 {
		f.Seq, f.Flags = pk.TCPAck, header.TCPFlagRST
	} else {
		segLen := uint32(pk.TCPLen)
		if pk.TCPFlags&header.TCPFlagSYN != 0 {
			segLen++
		}
		if pk.TCPFlags&header.TCPFlagFIN != 0 {
			segLen++
		}
		f.Ack, f.Flags = pk.TCPSeq+segLen, header.TCPFlagRST|header.TCPFlagACK
	}
	t := header.TCP(ip[ihl:]).Fixed()
	t.Encode(&f)
	t.SetChecksum(header.ChecksumFold(header.Checksum(t, pseudo)))
}
