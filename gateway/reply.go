package gateway

// Outside → pod: the reply (or quoted) tuple, the DNAT rewrite or ICMP
// error translation, and the encapsulation back to the pod's node.

import (
	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/route"
)

// replyPrepare checks a packet from the outside to a hosted egress IP up to
// its flow lookup and builds the key: the reply tuple, or for an ICMP error
// the reply tuple of the packet it quotes.
func (pr *Processor) replyPrepare(s *frame, l *conntrack.Lookup) Result {
	pk := &s.pk
	if pk.TTL <= 1 {
		return pr.drop(DropTTLExpired)
	}
	if pk.Frag && pk.FragOff != 0 {
		s.op, s.later = stepReply, true
		return Result{}
	}
	t := &l.Key
	l.Dir, l.Flags = conntrack.Reply, 0
	l.HasSeq, l.Related = false, false
	switch pk.Proto {
	case header.ProtoTCP, header.ProtoUDP:
		if !pk.HasL4 {
			return pr.drop(fragOrMalformed(pk))
		}
		*t = conntrack.Tuple{Src: conntrack.Addr(pk.Src), Dst: conntrack.Addr(pk.Dst), SrcPort: pk.SrcPort, DstPort: pk.DstPort, Proto: pk.Proto}
		if pk.Proto == header.ProtoTCP {
			l.Flags = pk.TCPFlags
			l.Seq, l.Ack, l.Len, l.HasSeq = pk.TCPSeq, pk.TCPAck, pk.TCPLen, true
		}
	case header.ProtoICMPv4, header.ProtoICMPv6:
		if !pk.HasL4 {
			return pr.drop(fragOrMalformed(pk))
		}
		switch {
		case pk.ICMPEcho && (pk.ICMPType == header.ICMPv4EchoReply || pk.ICMPType == header.ICMPv6EchoReply):
			*t = conntrack.Tuple{Src: conntrack.Addr(pk.Src), Dst: conntrack.Addr(pk.Dst), SrcPort: 0, DstPort: pk.ICMPID, Proto: pk.Proto}
		case pk.ICMPErr:
			if pk.EmbSrc != pk.Dst {
				return pr.drop(DropNoFlow) // quotes a packet we did not send
			}
			*t = conntrack.Tuple{Src: conntrack.Addr(pk.EmbDst), Dst: conntrack.Addr(pk.EmbSrc), SrcPort: pk.EmbDstPort, DstPort: pk.EmbSrcPort, Proto: pk.EmbProto}
			// Translated back to the pod, but no answer from the
			// server: any router on the path can send one, so it must
			// neither make the flow answered nor keep it alive.
			s.isErr, l.Related = true, true
		case pk.ICMPEcho:
			return pr.drop(DropNoFlow) // echo request to an egress IP: unsolicited
		default:
			return pr.drop(DropICMPType)
		}
	default:
		return pr.drop(DropUnsupportedProto)
	}
	s.op = stepReply
	return Result{}
}

// replyFinish takes a packet from the outside back to its pod once its flow
// is looked up.
func (pr *Processor) replyFinish(st *installed, now int64, s *frame, l *conntrack.Lookup) Result {
	pk, in, out := &s.pk, s.in, s.out
	var podAddr [16]byte
	var podPort uint16
	var aux uint32
	if s.later {
		var r DropReason
		podAddr, aux, r = pr.frags.later(fragIn, &pk.Src, &pk.Dst, pk.FragID, pk.Proto, now, int(pk.FragOff)*8, pk.End-pk.L4, pk.MoreFrags)
		if r != DropNone {
			return pr.drop(r)
		}
	} else {
		if !l.Hit {
			return pr.drop(DropNoFlow)
		}
		podAddr, podPort, aux = [16]byte(l.Flow.Orig.Src), l.Flow.Orig.SrcPort, l.Flow.Aux
		if pk.Frag && !s.isErr {
			fe, r := pr.frags.first(fragIn, &pk.Src, &pk.Dst, pk.FragID, pk.Proto, now, pk.End-pk.L4)
			if r != DropNone {
				return pr.drop(r)
			}
			fe.addr, fe.aux = podAddr, aux
		}
	}

	vi, tn := unpackAux(aux)
	tid := pr.p.tunnels.ids[tn]
	if int(vi) >= len(st.nodeOfVTEP) || st.nodeOfVTEP[vi] < 0 {
		return pr.drop(DropUnknownNode)
	}
	node := &st.snap.nodes[st.nodeOfVTEP[vi]]
	if st.snap.routes.Lookup(&node.vtep, &pr.hop) != route.Found {
		return pr.drop(DropNoRoute)
	}
	ipLen := pk.End - pk.L3
	hl := encapLen(node.fam)
	if mtu := pr.hop.MTU - (hl - header.EthernetLen); ipLen > mtu {
		// Too big for the tunnel once encapsulated. A router answers the
		// sender so its PMTU discovery works; it never answers an ICMP
		// error, a later fragment, or IPv4 without DF, which a router
		// would fragment: the gateway does not, it drops and counts.
		if s.isErr || s.later || (pk.IPVer == 4 && !header.IPv4(in[pk.L3:pk.L3+header.IPv4MinLen]).Fixed().DontFragment()) {
			return pr.drop(DropMTUExceeded)
		}
		return pr.tooBigToOutside(st, pk, now, in, out, mtu)
	}
	n := hl + ipLen
	if n > len(out) {
		return pr.drop(DropOutBuffer)
	}
	ip, src := out[hl:n], in[pk.L3:pk.End]
	switch {
	case s.later:
		copy(ip, src)
		decTTL(ip, pk.IPVer)
		setFragAddr(ip, pk.IPVer, dstSide, &podAddr)
	case s.isErr:
		copy(ip, src)
		decTTL(ip, pk.IPVer)
		xlateICMPError(ip, pk, &podAddr, podPort)
		pr.stats.local.Counters[CounterICMPXlated]++
	default:
		rewriteNAT(ip, src, pk, dstSide, &podAddr, podPort)
	}
	writeEncap(out[:n], node, tid.kind, tid.vni, &pr.hop, pk.IPVer, entropy(&podAddr, podPort, &pk.Src))
	pr.stats.local.Counters[CounterReplied]++
	return Result{Verdict: VerdictTx, Ifindex: pr.hop.Ifindex, Len: n}
}
