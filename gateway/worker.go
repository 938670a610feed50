package gateway

import (
	"errors"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/nat"
)

// Default sizes of a worker's IPv4 fragment table.
const (
	DefaultFragSlots   = 1024
	DefaultFragTimeout = 30e9 // ns: longer than typical reassembly timeouts
)

// Worker processes frames. It belongs to one goroutine; make one per
// receive queue with Pipeline.NewWorker.
type Worker struct {
	p       *Pipeline
	ct      *conntrack.Table
	alloc   *nat.Allocator
	pk      Parsed
	flow    conntrack.Flow
	tuple   conntrack.Tuple
	hop     Hop
	rnd     uint64
	frags   fragTable
	stats   *workerStats
	release func(*conntrack.Flow)

	icmpTokens int   // ICMP errors to the outside still allowed (icmpOutAllowed)
	icmpLast   int64 // when the bucket was last refilled
}

// NewWorker returns a new worker of p; seed varies the NAT port choice
// between workers.
func (p *Pipeline) NewWorker(seed uint64) *Worker {
	w := &Worker{p: p, ct: p.ct, alloc: p.alloc, rnd: seed | 1, stats: new(workerStats)}
	w.frags.init(DefaultFragSlots, DefaultFragTimeout)
	w.release = w.releaseFlow
	p.mu.Lock()
	p.workers = append(p.workers, w)
	p.mu.Unlock()
	return w
}

// Stats returns this worker's counters as of its last batch.
func (w *Worker) Stats() Stats {
	var s Stats
	w.stats.read(&s)
	return s
}

// Process handles a batch: for each in[i] it writes a Result into res[i] and,
// for VerdictTx, the frame to send into out[i][:res[i].Len]. in[i] is never
// modified. now is monotonic nanoseconds, read once per batch by the caller.
// len(out) and len(res) must be at least len(in).
func (w *Worker) Process(now int64, in, out [][]byte, res []Result) {
	if len(in) == 0 {
		return
	}
	st := w.p.state.Load()
	_ = out[len(in)-1]
	_ = res[len(in)-1]
	for i, f := range in {
		res[i] = w.process(st, now, f, out[i])
	}
	w.stats.publish()
}

// ProcessOne handles a single frame; Process is the batched form.
func (w *Worker) ProcessOne(now int64, in, out []byte) Result {
	r := w.process(w.p.state.Load(), now, in, out)
	w.stats.publish()
	return r
}

func (w *Worker) drop(r DropReason) Result {
	w.stats.local.Drops[r]++
	return Result{Verdict: VerdictDrop, Reason: r}
}

func (w *Worker) pass() Result {
	w.stats.local.Counters[CounterPass]++
	return Result{Verdict: VerdictPass}
}

func (w *Worker) process(st *installed, now int64, in, out []byte) Result {
	w.stats.local.Counters[CounterRx]++
	pk := &w.pk
	pk.Decode(in)
	switch pk.Kind {
	case KindOther:
		return w.pass()
	case KindMalformed:
		return w.drop(pk.Bad)
	case KindTunnel:
		if st == nil {
			return w.drop(DropNoConfig)
		}
		f := fam(pk.OuterVer)
		if !st.snap.hasVTEP[f] || st.snap.vtep[f] != pk.OuterDst {
			return w.pass()
		}
		return w.forward(st, now, in, out)
	default: // KindIP
		if st == nil {
			return w.pass()
		}
		if !st.snap.hosted.has(&pk.Dst) {
			return w.pass()
		}
		return w.reply(st, now, in, out)
	}
}

func fam(ver uint8) uint8 { return (ver >> 1) & 1 } // 4 → 0, 6 → 1

func (w *Worker) random() uint64 {
	// xorshift64*: cheap, per worker, good enough to spread NAT ports.
	x := w.rnd
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	w.rnd = x
	return x * 0x2545f4914f6cdd1d
}

// forward takes a decapsulated pod packet to the outside.
func (w *Worker) forward(st *installed, now int64, in, out []byte) Result {
	pk := &w.pk
	snap := st.snap
	nip, ok := snap.nodeByVTEP.get(&pk.OuterSrc)
	if !ok {
		return w.drop(DropUnknownVTEP)
	}
	ni := *nip
	pod, ok := snap.pods.get(&pk.Src)
	if !ok || pod.node != ni {
		return w.drop(DropSpoofedSource)
	}
	if pod.policy < 0 {
		return w.drop(DropNotSelected)
	}
	if pk.Frag && pk.IPVer == 6 {
		return w.drop(DropIPv6Fragment)
	}
	if pk.TTL <= 1 {
		return w.icmpToPod(st, ni, in, out, icmpTimeExceeded, 0, DropTTLExpired)
	}

	// Route and size first: a packet that cannot leave must not create a flow.
	if !snap.routes.Lookup(&pk.Dst, &w.hop) {
		return w.drop(DropNoRoute)
	}
	ipLen := pk.End - pk.L3
	if ipLen > w.hop.MTU {
		if pk.IPVer == 4 && in[pk.L3+6]&0x40 == 0 {
			return w.drop(DropMTUExceeded) // DF clear: a router would fragment; we do not
		}
		return w.icmpToPod(st, ni, in, out, icmpTooBig, w.hop.MTU, DropMTUExceeded)
	}
	n := ethLen + ipLen
	if n > len(out) {
		return w.drop(DropOutBuffer)
	}

	var natAddr [16]byte
	var natPort uint16
	later := pk.Frag && pk.FragOff != 0
	if later {
		e := w.frags.lookup(fragOut, &pk.Src, &pk.Dst, pk.FragID, pk.Proto, now)
		if e == nil {
			return w.drop(DropFragNoFirst)
		}
		natAddr = e.addr
	} else {
		t := &w.tuple
		t.Src, t.Dst, t.Proto = conntrack.Addr(pk.Src), conntrack.Addr(pk.Dst), pk.Proto
		var flags uint8
		switch pk.Proto {
		case protoTCP, protoUDP:
			if !pk.HasL4 {
				return w.drop(DropMalformed)
			}
			t.SrcPort, t.DstPort = pk.SrcPort, pk.DstPort
			flags = pk.TCPFlags
		case protoICMP, protoICMPv6:
			if !pk.HasL4 {
				return w.drop(DropMalformed)
			}
			if !pk.ICMPEcho || (pk.ICMPType != icmp4Echo && pk.ICMPType != icmp6Echo) {
				return w.drop(DropICMPType)
			}
			t.SrcPort, t.DstPort = pk.ICMPID, 0
		default:
			return w.drop(DropUnsupportedProto)
		}
		if !w.ct.Track(conntrack.Original, t, flags, now, &w.flow) {
			if r := w.newFlow(st, ni, pod.policy, flags, now); r != DropNone {
				return w.drop(r)
			}
		}
		natAddr, natPort = [16]byte(w.flow.NATAddr), w.flow.NATPort
	}

	writeEth(out, &w.hop.DstMAC, &w.hop.SrcMAC, pk.IPVer)
	copy(out[ethLen:n], in[pk.L3:pk.End])
	ip := out[ethLen:n]
	l4 := pk.L4 - pk.L3
	decTTL(ip, pk.IPVer)
	if later {
		setAddrV4(ip, ipSrc, &natAddr)
	} else {
		natRewrite(ip, pk.IPVer, l4, pk.Proto, srcSide, &natAddr, natPort, pk.ICMPEcho)
		if pk.Frag && pk.IPVer == 4 {
			w.frags.add(fragOut, &pk.Src, &pk.Dst, pk.FragID, pk.Proto, now, &natAddr, 0)
		}
	}
	w.stats.local.Counters[CounterForwarded]++
	return Result{Verdict: VerdictTx, Ifindex: w.hop.Ifindex, Len: n}
}

// newFlow allocates a NAT binding for w.tuple and inserts the flow into
// w.flow. It returns DropNone on success.
func (w *Worker) newFlow(st *installed, ni int32, policy int32, flags uint8, now int64) DropReason {
	t := &w.tuple
	if t.Proto == protoTCP && flags&(conntrack.FlagSYN|conntrack.FlagACK|conntrack.FlagRST|conntrack.FlagFIN) != conntrack.FlagSYN {
		return DropTCPNoFlow
	}
	if st.snap.hosted.has(&w.pk.Dst) {
		// Checked only here: no flow to a hosted egress IP is ever created,
		// so established traffic needs no hairpin lookup.
		return DropHairpin
	}
	ips := st.snap.policies[policy].ips[fam(w.pk.IPVer)]
	if len(ips) == 0 {
		return DropNoEgressIP
	}
	src, dst := nat.Addr(t.Src), nat.Addr(t.Dst)
	h := nat.FlowHash(t.Proto, src, t.SrcPort, dst, t.DstPort)
	natAddr := ips[nat.Pick(ips, h)]
	port, err := w.alloc.Allocate(t.Proto, src, t.SrcPort, dst, t.DstPort, natAddr, w.random())
	if err != nil {
		return DropNATExhausted
	}
	f := &w.flow
	*f = conntrack.Flow{Orig: *t, NATAddr: conntrack.Addr(natAddr), NATPort: port,
		Aux: packAux(st.vtepOfNode[ni], w.pk.Tunnel, w.pk.VNI)}
	err = w.ct.Insert(f, flags, now)
	if err == nil {
		w.stats.local.Counters[CounterFlowsNew]++
		return DropNone
	}
	w.alloc.Release(t.Proto, src, t.SrcPort, dst, t.DstPort, natAddr, port)
	if errors.Is(err, conntrack.ErrExists) && w.ct.Track(conntrack.Original, t, flags, now, f) {
		return DropNone // another worker created it meanwhile
	}
	if errors.Is(err, conntrack.ErrFull) {
		return DropConntrackFull
	}
	return DropNATExhausted // the reply tuple was taken between Allocate and Insert
}

// reply takes a packet from the outside to a hosted egress IP back to its pod.
func (w *Worker) reply(st *installed, now int64, in, out []byte) Result {
	pk := &w.pk
	if pk.Frag && pk.IPVer == 6 {
		return w.drop(DropIPv6Fragment)
	}
	if pk.TTL <= 1 {
		return w.drop(DropTTLExpired)
	}
	var podAddr [16]byte
	var podPort uint16
	var aux uint64
	later := pk.Frag && pk.FragOff != 0
	isErr := false
	if later {
		e := w.frags.lookup(fragIn, &pk.Src, &pk.Dst, pk.FragID, pk.Proto, now)
		if e == nil {
			return w.drop(DropFragNoFirst)
		}
		podAddr, aux = e.addr, e.aux
	} else {
		t := &w.tuple
		var flags uint8
		switch pk.Proto {
		case protoTCP, protoUDP:
			if !pk.HasL4 {
				return w.drop(DropMalformed)
			}
			*t = conntrack.Tuple{Src: conntrack.Addr(pk.Src), Dst: conntrack.Addr(pk.Dst), SrcPort: pk.SrcPort, DstPort: pk.DstPort, Proto: pk.Proto}
			flags = pk.TCPFlags
		case protoICMP, protoICMPv6:
			if !pk.HasL4 {
				return w.drop(DropMalformed)
			}
			switch {
			case pk.ICMPEcho && (pk.ICMPType == icmp4EchoReply || pk.ICMPType == icmp6EchoReply):
				*t = conntrack.Tuple{Src: conntrack.Addr(pk.Src), Dst: conntrack.Addr(pk.Dst), SrcPort: 0, DstPort: pk.ICMPID, Proto: pk.Proto}
			case pk.ICMPErr:
				if pk.EmbSrc != pk.Dst {
					return w.drop(DropNoFlow) // quotes a packet we did not send
				}
				*t = conntrack.Tuple{Src: conntrack.Addr(pk.EmbDst), Dst: conntrack.Addr(pk.EmbSrc), SrcPort: pk.EmbDstPort, DstPort: pk.EmbSrcPort, Proto: pk.EmbProto}
				isErr = true
			case pk.ICMPEcho:
				return w.drop(DropNoFlow) // echo request to an egress IP: unsolicited
			default:
				return w.drop(DropICMPType)
			}
		default:
			return w.drop(DropUnsupportedProto)
		}
		if !w.ct.Track(conntrack.Reply, t, flags, now, &w.flow) {
			return w.drop(DropNoFlow)
		}
		podAddr, podPort, aux = [16]byte(w.flow.Orig.Src), w.flow.Orig.SrcPort, w.flow.Aux
	}

	vi, tun, vni := unpackAux(aux)
	if int(vi) >= len(st.nodeOfVTEP) || st.nodeOfVTEP[vi] < 0 {
		return w.drop(DropUnknownNode)
	}
	node := &st.snap.nodes[st.nodeOfVTEP[vi]]
	if !st.snap.routes.Lookup(&node.vtep, &w.hop) {
		return w.drop(DropNoRoute)
	}
	ipLen := pk.End - pk.L3
	hl := encapLen(node.fam)
	if mtu := w.hop.MTU - (hl - ethLen); ipLen > mtu {
		// Too big for the tunnel once encapsulated. A router answers the
		// sender so its PMTU discovery works; it never answers an ICMP
		// error, a later fragment, or IPv4 without DF, which a router
		// would fragment: the gateway does not, it drops and counts.
		if isErr || later || (pk.IPVer == 4 && in[pk.L3+6]&0x40 == 0) {
			return w.drop(DropMTUExceeded)
		}
		return w.tooBigToOutside(st, now, in, out, mtu)
	}
	n := hl + ipLen
	if n > len(out) {
		return w.drop(DropOutBuffer)
	}
	copy(out[hl:n], in[pk.L3:pk.End])
	ip := out[hl:n]
	decTTL(ip, pk.IPVer)
	switch {
	case later:
		setAddrV4(ip, ipDst, &podAddr)
	case isErr:
		xlateICMPError(ip, pk, &podAddr, podPort)
		w.stats.local.Counters[CounterICMPXlated]++
	default:
		natRewrite(ip, pk.IPVer, pk.L4-pk.L3, pk.Proto, dstSide, &podAddr, podPort, pk.ICMPEcho)
		if pk.Frag && pk.IPVer == 4 {
			w.frags.add(fragIn, &pk.Src, &pk.Dst, pk.FragID, pk.Proto, now, &podAddr, aux)
		}
	}
	writeEncap(out[:n], st.snap, node, tun, vni, &w.hop, pk.IPVer, entropy(&podAddr, podPort, &pk.Src))
	w.stats.local.Counters[CounterReplied]++
	return Result{Verdict: VerdictTx, Ifindex: w.hop.Ifindex, Len: n}
}

// Expire removes up to budget expired flows and releases their NAT ports.
// Call it periodically from the worker's goroutine (e.g. between batches).
func (w *Worker) Expire(now int64, budget int) int {
	n := w.ct.Expire(now, budget, w.release)
	w.stats.local.Counters[CounterFlowsExpired] += uint64(n)
	w.stats.publish()
	return n
}

func (w *Worker) releaseFlow(f *conntrack.Flow) {
	o := &f.Orig
	w.alloc.Release(o.Proto, nat.Addr(o.Src), o.SrcPort, nat.Addr(o.Dst), o.DstPort, nat.Addr(f.NATAddr), f.NATPort)
}
