package gateway

// Pod → outside: checks, the flow lookup key, new flows and their NAT
// binding, the SNAT rewrite.

import (
	"errors"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/natlog"
	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/nat"
)

// prefetchNewFlows starts loading, for every pod frame of the batch whose
// lookup missed and that may open a flow, the index line of the reply tuple
// its NAT port check (Allocate's ReplyInUse) will most likely ask about:
// the egress IP the flow hash picks, with the pod's own source port. On a
// big table that line is a cache miss per new flow, as long as a lookup's;
// prefetched for the whole batch first, the misses overlap as TrackBatch's
// do. It is only a hint: a wrong guess (another port, the flow exists after
// all) costs a wasted load, never a different result. It keeps each flow's
// egress IP choice for newFlow.
func (pr *Processor) prefetchNewFlows(st *installed, in [][]byte) {
	var r conntrack.Tuple
	for i := range in {
		fr := &pr.frames[i]
		if fr.op != stepForward || fr.later {
			continue
		}
		l := &pr.lks[fr.lk]
		if l.Hit || !opensFlow(&l.Key, l.Flags) {
			continue
		}
		if fr.dest >= 0 && chooseByDest(st.snap, fr) != DropNone {
			continue
		}
		ips := st.snap.policies[fr.policy].ips[fam(fr.pk.IPVer)]
		if len(ips) == 0 {
			continue
		}
		t := &l.Key
		h := nat.FlowHash(t.Proto, nat.Addr(t.Src), t.SrcPort, nat.Addr(t.Dst), t.DstPort)
		fr.pick, fr.picked = int32(nat.Pick(ips, h)), true
		r.Src, r.Dst = t.Dst, conntrack.Addr(ips[fr.pick])
		r.SrcPort, r.DstPort, r.Proto = t.DstPort, t.SrcPort, t.Proto
		pr.ct.Prefetch(&r)
	}
}

// forwardPrepare checks a decapsulated pod packet up to its flow lookup:
// anti-spoof, policy, TTL, route and size (a packet that cannot leave must
// not create a flow), then the lookup key.
func (pr *Processor) forwardPrepare(st *installed, now int64, s *frame, l *conntrack.Lookup) Result {
	pk, in, out := &s.pk, s.in, s.out
	snap := st.snap
	// The usual case takes one table lookup: the inner source is a pod whose
	// node's VTEP is the outer source, so the VTEP is known and the pod is
	// that node's. Anything else is sorted out in the order of the checks.
	pod, ok := snap.pods.get(&pk.Src)
	var ni int32
	if ok && pod.vtep == pk.OuterSrc {
		ni = pod.node
	} else {
		nip, known := snap.nodeByVTEP.get(&pk.OuterSrc)
		if !known {
			return pr.drop(DropUnknownVTEP)
		}
		ni = *nip
		if !ok || pod.node != ni {
			if (ni == snap.localNode) != pr.fromLocal {
				return pr.drop(DropUnknownVTEP)
			}
			if snap.localNode >= 0 && !pr.fromLocal {
				if dp, isPod := snap.pods.get(&pk.Dst); isPod && dp.node == snap.localNode {
					return pr.toLocalKernel(snap, s)
				}
			}
			return pr.drop(DropSpoofedSource)
		}
	}
	if (ni == snap.localNode) != pr.fromLocal {
		// The local node's VTEP from the wire, or a tunnel frame of a
		// worker through the local port: neither is what it claims.
		return pr.drop(DropUnknownVTEP)
	}
	if pod.policy < 0 && pod.dest < 0 {
		return pr.drop(DropNotSelected)
	}
	if pk.TTL <= 1 {
		return pr.icmpToPod(st, pk, now, ni, in, out, icmpTimeExceeded, 0, DropTTLExpired)
	}
	if snap.routes.Lookup(&pk.Dst, &s.hop) != route.Found {
		// The gateway node's own addresses and unresolvable neighbours on
		// its subnet have no usable route: a denied one still counts as
		// such, so the deny-list's counter shows every attempt. Only on
		// this miss path: a routed packet is checked once, in newFlow.
		if snap.denied(&pk.Dst, fam(pk.IPVer)) {
			return pr.drop(DropDeniedDestination)
		}
		return pr.drop(DropNoRoute)
	}
	ipLen := pk.End - pk.L3
	if ipLen > s.hop.MTU {
		if pk.IPVer == 4 && !header.IPv4(in[pk.L3:pk.L3+header.IPv4MinLen]).Fixed().DontFragment() {
			return pr.drop(DropMTUExceeded) // DF clear: a router would fragment; we do not
		}
		return pr.icmpToPod(st, pk, now, ni, in, out, icmpTooBig, s.hop.MTU, DropMTUExceeded)
	}
	s.n = header.EthernetLen + ipLen
	if s.n > len(out) {
		return pr.drop(DropOutBuffer)
	}
	s.ni, s.policy, s.fallbk, s.dest, s.chosen = ni, pod.policy, pod.policy, pod.dest, false
	if pk.Frag && pk.FragOff != 0 {
		s.op, s.later = stepForward, true
		return Result{}
	}
	t := &l.Key
	// Word copies: Decode stored the addresses as 8-byte words, and a
	// 16-byte load of them could not be forwarded from those stores.
	copy16((*[16]byte)(&t.Src), &pk.Src)
	copy16((*[16]byte)(&t.Dst), &pk.Dst)
	t.Proto = pk.Proto
	l.Dir, l.Flags = conntrack.Original, 0
	l.HasSeq, l.Related = false, false
	switch pk.Proto {
	case header.ProtoTCP, header.ProtoUDP:
		if !pk.HasL4 {
			return pr.drop(fragOrMalformed(pk))
		}
		t.SrcPort, t.DstPort = pk.SrcPort, pk.DstPort
		if pk.Proto == header.ProtoTCP {
			l.Flags = pk.TCPFlags
			l.Seq, l.Ack, l.Len, l.HasSeq = pk.TCPSeq, pk.TCPAck, pk.TCPLen, true
		}
	case header.ProtoICMPv4, header.ProtoICMPv6:
		if !pk.HasL4 {
			return pr.drop(fragOrMalformed(pk))
		}
		if !pk.ICMPEcho || (pk.ICMPType != header.ICMPv4EchoRequest && pk.ICMPType != header.ICMPv6EchoRequest) {
			return pr.drop(DropICMPType)
		}
		t.SrcPort, t.DstPort = pk.ICMPID, 0
	default:
		return pr.drop(DropUnsupportedProto)
	}
	s.op = stepForward
	return Result{}
}

// forwardFinish takes a pod packet to the outside once its flow is looked
// up: a miss becomes a new flow; then the NAT rewrite.
func (pr *Processor) forwardFinish(st *installed, now int64, s *frame, l *conntrack.Lookup) Result {
	pk, in, out := &s.pk, s.in, s.out
	var natAddr [16]byte
	var natPort uint16
	if s.later {
		var r DropReason
		natAddr, _, r = pr.frags.later(fragOut, &pk.Src, &pk.Dst, pk.FragID, pk.Proto, now, int(pk.FragOff)*8, pk.End-pk.L4, pk.MoreFrags)
		if r != DropNone {
			return pr.drop(r)
		}
	} else {
		stale := l.Hit && !natOwn(st, s, &l.Flow) && (s.dest < 0 || !natByDest(st, s, &l.Flow))
		if stale && s.dest >= 0 {
			// A flow of a pod with destination rules keeps its egress IP
			// while that stays one of the pod's policies' here, whatever
			// the rules now say of its destination (natCurrent). Past
			// that, the flow is treated as a new one's policy would be:
			// the destination's owner decides below whether it is in
			// transit or moves.
			if r := chooseByDest(st.snap, s); r != DropNone {
				return pr.drop(r)
			}
		}
		if stale && len(st.snap.policies[s.policy].ips[fam(pk.IPVer)]) == 0 {
			// A flow while the pod's policy has no egress IP of the family
			// here: its IP is in transit. It has just left for another
			// gateway, which holds the flow's synced copy and carries the
			// connection once the workers steer there; or this gateway
			// holds the flow as a backup and hosts its IP as soon as its
			// configuration arrives (the workers steered here first).
			// Nothing here can carry the packet, and retiring the flow
			// would destroy the backup and reset the pod's connection that
			// the takeover is about to carry on: the packet is dropped,
			// the flow kept, and the pod's retransmission finds the IP's
			// owner.
			return pr.drop(DropNoEgressIP)
		}
		// A first fragment takes its fragment entry before any flow is
		// made: one it cannot have must leave no flow behind.
		var fe *fragEntry
		if pk.Frag {
			var r DropReason
			if fe, r = pr.frags.first(fragOut, &pk.Src, &pk.Dst, pk.FragID, pk.Proto, now, pk.End-pk.L4); r != DropNone {
				return pr.drop(r)
			}
		}
		retired := false
		if stale {
			l.Hit, retired = pr.retire(st, s, l, now)
		}
		if !l.Hit {
			// The segment that retires a connection from an egress IP
			// this gateway no longer hosts for the pod is not picked up
			// on another: the server knows it by the old address.
			if r := pr.newFlow(st, s, l, now, !retired); r != DropNone {
				if fe != nil {
					pr.frags.release(fe)
				}
				if r == DropTCPNoFlow {
					// A TCP segment of a connection this gateway does not
					// know and could not pick up (newFlow): the pod learns
					// at once instead of retransmitting into nothing.
					return pr.resetToPod(st, s, now)
				}
				return pr.drop(r)
			}
		}
		natAddr, natPort = [16]byte(l.Flow.NATAddr), l.Flow.NATPort
		if fe != nil {
			fe.addr = natAddr
		}
	}
	n := s.n
	writeEth(out, &s.hop.DstMAC, &s.hop.SrcMAC, pk.IPVer)
	ip, src := out[header.EthernetLen:n], in[pk.L3:pk.End]
	if s.later {
		copy(ip, src)
		decTTL(ip, pk.IPVer)
		setFragAddr(ip, pk.IPVer, srcSide, &natAddr)
	} else {
		rewriteNAT(ip, src, pk, srcSide, &natAddr, natPort)
	}
	pr.stats.local.Counters[CounterForwarded]++
	return Result{Verdict: VerdictTx, Ifindex: s.hop.Ifindex, Len: n}
}

// natCurrent reports whether flow f's egress IP is still one of the IPs of
// frame s's pod's policy hosted here, for the packet's family. Pick keeps a
// flow on its IP for life; this is what ends that life when the IP leaves.
// For a pod with destination rules, any policy the rules name counts as
// the pod's: a flow keeps its IP when the rules give its destination to
// another of them (new flows follow the rules, established ones do not).
func natCurrent(st *installed, s *frame, f *conntrack.Flow) bool {
	return natOwn(st, s, f) || (s.dest >= 0 && natByDest(st, s, f))
}

// natOwn is natCurrent for the pod's own policy alone: small enough to
// inline where every established packet asks it.
func natOwn(st *installed, s *frame, f *conntrack.Flow) bool {
	if s.fallbk < 0 {
		return false
	}
	for _, ip := range st.snap.policies[s.fallbk].ips[fam(s.pk.IPVer)] {
		if ip == nat.Addr(f.NATAddr) {
			return true
		}
	}
	return false
}

// natByDest is natCurrent for the policies frame s's pod's destination
// rules name.
func natByDest(st *installed, s *frame, f *conntrack.Flow) bool {
	fa := fam(s.pk.IPVer)
	for _, o := range st.snap.dests[s.dest].owners {
		if hasNAT(st.snap.policies[o].ips[fa], f) {
			return true
		}
	}
	return false
}

func hasNAT(ips []nat.Addr, f *conntrack.Flow) bool {
	for _, ip := range ips {
		if ip == nat.Addr(f.NATAddr) {
			return true
		}
	}
	return false
}

// chooseByDest sets the policy of a new flow of frame s, whose pod has
// destination rules, from the rule holding its destination (the pod's
// fallback where none does), once per frame. It returns DropDestNotOwned
// when that leaves no policy (an exclusion, or no rule and no fallback)
// or a policy with no egress IP hosted here: the worker steered the flow
// to a gateway that is not its destination's, and no other policy's IP
// may stand in for it.
func chooseByDest(snap *Snapshot, s *frame) DropReason {
	if !s.chosen {
		v := snap.dests[s.dest].choose(&s.pk.Dst, s.pk.IPVer == 4)
		if v == destNoRule {
			v = s.fallbk
		}
		s.policy, s.chosen = v, true
	}
	if s.policy < 0 || !snap.policies[s.policy].hosted {
		return DropDestNotOwned
	}
	return DropNone
}

// retire handles a hit on a flow whose egress IP is no longer one of its
// pod's policy's IPs hosted here: the IP moved to another gateway, or the
// pod's policy changed. Its packets would leave from an address this
// gateway no longer owns, and the replies would go elsewhere, so the flow is
// removed, its port released and flows_moved counted. The packet is then a
// miss: UDP and ICMP open a flow on a current egress IP (the flows of the IP
// that left move, and no other), TCP is tcp_no_flow. An earlier frame of
// the batch may have done this already: the key is looked up again first,
// and a current flow found then is used. It reports whether l now holds a
// current flow, and whether this frame removed the flow.
func (pr *Processor) retire(st *installed, s *frame, l *conntrack.Lookup, now int64) (current, removed bool) {
	natAddr, natPort := l.Flow.NATAddr, l.Flow.NATPort
	if pr.ct.Track(conntrack.Original, &l.Key, l.Flags, now, &l.Flow) {
		if natCurrent(st, s, &l.Flow) {
			return true, false
		}
		natAddr, natPort = l.Flow.NATAddr, l.Flow.NATPort
	}
	var gone conntrack.Flow
	if pr.ct.DeleteBinding(&l.Key, natAddr, natPort, &gone) {
		pr.releaseFlow(&gone)
		pr.stats.local.Counters[CounterFlowsMoved]++
		return false, true
	}
	return false, false
}

// opensFlow reports whether a pod packet with tuple t and TCP flags may
// open a flow: any UDP or ICMP echo, and TCP only with a bare SYN.
func opensFlow(t *conntrack.Tuple, flags uint8) bool {
	const f = conntrack.FlagSYN | conntrack.FlagACK | conntrack.FlagRST | conntrack.FlagFIN
	return t.Proto != header.ProtoTCP || flags&f == conntrack.FlagSYN
}

// picksUp reports whether a pod's TCP segment that opens no flow may pick
// one up mid-stream (the idea of netfilter's tcp_loose): a segment of an
// established connection whose flow this gateway does not hold, because
// the egress IP moved here from a gateway that died or the gateway
// restarted. Never a SYN (that opens a flow the ordinary way), a RST, nor
// a FIN: a closing connection gains nothing from a new flow, and a FIN's
// FIN_WAIT flow could not be dropped early, so FINs to silent destinations
// would hold table entries. Only ever asked of a pod's packet: traffic from
// outside opens nothing.
func picksUp(t *conntrack.Tuple, flags uint8) bool {
	return t.Proto == header.ProtoTCP && flags&(conntrack.FlagSYN|conntrack.FlagRST|conntrack.FlagFIN) == 0
}

// newFlow allocates a NAT binding for frame s's lookup l.Key and inserts
// the flow into l.Flow. It returns DropNone on success.
//
// A pod's TCP segment of a connection this gateway holds no flow for is
// picked up (picksUp) when its policy has one egress IP here for the
// family and that IP has the pod's own source port free towards the
// server (and the flow was not just retired from another IP of the
// policy): with port preservation that is
// the 5-tuple the server already knows, so the connection goes on. The flow
// starts PICKED_UP, unanswered until the server
// speaks. Otherwise the segment is tcp_no_flow, and the caller resets it.
func (pr *Processor) newFlow(st *installed, s *frame, l *conntrack.Lookup, now int64, mayPickUp bool) DropReason {
	pk, ni, policy := &s.pk, s.ni, s.policy
	t, flags := &l.Key, l.Flags
	pickup := false
	if !opensFlow(t, flags) {
		if !mayPickUp || !picksUp(t, flags) {
			return DropTCPNoFlow
		}
		pickup = true
	}
	if st.snap.hosted.has(&pk.Dst) {
		// Checked only here: no flow to a hosted egress IP is ever created,
		// so established traffic needs no hairpin lookup.
		return DropHairpin
	}
	if st.snap.denied(&pk.Dst, fam(pk.IPVer)) {
		return DropDeniedDestination
	}
	if s.dest >= 0 {
		if r := chooseByDest(st.snap, s); r != DropNone {
			return r
		}
		policy = s.policy
	}
	ips := st.snap.policies[policy].ips[fam(pk.IPVer)]
	if len(ips) == 0 {
		return DropNoEgressIP
	}
	if pickup && len(ips) != 1 {
		// Which of several IPs the connection had is unknown here (one
		// may have just left). An assignment puts at most one IP of an
		// object on a node, so this is a static configuration's case.
		return DropTCPNoFlow
	}
	tn, ok := pr.tunnelNumber(tunnelID{pk.Tunnel, pk.VNI})
	if !ok {
		return DropTunnelMismatch // not accepted by any installed snapshot
	}
	src, dst := nat.Addr(t.Src), nat.Addr(t.Dst)
	pick := int(s.pick)
	if !s.picked {
		pick = nat.Pick(ips, nat.FlowHash(t.Proto, src, t.SrcPort, dst, t.DstPort))
	}
	natAddr := ips[pick]
	if r := pr.admit(t, natAddr, now); r != DropNone {
		if pickup {
			return DropTCPNoFlow
		}
		return r
	}
	var port uint16
	if pickup {
		if !pr.alloc.Preserve(t.Proto, src, t.SrcPort, dst, t.DstPort, natAddr) {
			return DropTCPNoFlow
		}
		port = t.SrcPort
	} else {
		var err error
		if port, err = pr.alloc.Allocate(t.Proto, src, t.SrcPort, dst, t.DstPort, natAddr, pr.random()); err != nil {
			return DropNATExhausted
		}
	}
	f := &l.Flow
	*f = conntrack.Flow{Orig: *t, NATAddr: conntrack.Addr(natAddr), NATPort: port,
		Aux: packAux(st.vtepOfNode[ni], tn)}
	err := pr.insertFlow(f, flags, now)
	if err == nil {
		pr.inserted = true
		pr.stats.local.Counters[CounterFlowsNew]++
		if pr.natlog != nil {
			pr.natlog.Push(&natlog.Record{Mono: now, Flow: *f, Event: natlog.EventCreate})
		}
		if pickup {
			pr.stats.local.Counters[CounterFlowsPickedUp]++
		}
		return DropNone
	}
	pr.alloc.Release(t.Proto, src, t.SrcPort, dst, t.DstPort, natAddr, port)
	if errors.Is(err, conntrack.ErrExists) && pr.ct.Track(conntrack.Original, t, flags, now, f) {
		return DropNone // another processor created it meanwhile
	}
	if pickup {
		return DropTCPNoFlow
	}
	return refusal(err)
}

// toLocalKernel hands a tunnel frame for a pod of this gateway's own node,
// another gateway's reply to it, to the node's kernel through the local
// port, unchanged but for its Ethernet addresses: the node's tunnel device
// decapsulates it there. The XDP program took it because it is addressed
// to the node's VTEP, where the gateway and that device share the tunnel
// port; the node's tunnel filter still decides whether its source may send
// to the device.
func (pr *Processor) toLocalKernel(snap *Snapshot, s *frame) Result {
	in, out := s.in, s.out
	if len(in) < header.EthernetLen+header.IPv4MinLen {
		return pr.drop(DropMalformed)
	}
	if et := header.Ethernet(in[:header.EthernetLen]).Fixed().EtherType(); et != header.EtherTypeIPv4 && et != header.EtherTypeIPv6 {
		return pr.drop(DropSpoofedSource) // VLAN-tagged: not for the local port
	}
	if snap.routes.Lookup(&snap.nodes[snap.localNode].vtep, &s.hop) != route.Found {
		return pr.drop(DropNoRoute)
	}
	if len(in) > len(out) {
		return pr.drop(DropOutBuffer)
	}
	copy(out, in)
	copy(out[0:6], s.hop.DstMAC[:])
	copy(out[6:12], s.hop.SrcMAC[:])
	pr.stats.local.Counters[CounterPass]++
	return Result{Verdict: VerdictTx, Ifindex: s.hop.Ifindex, Len: len(in)}
}
