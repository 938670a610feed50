package gateway

import (
	"errors"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/route"
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
	hop     route.Hop // the reply path's next hop and the ICMP errors' (scratch)
	rnd     uint64
	frags   fragTable
	stats   *workerStats
	release func(*conntrack.Flow)

	// single makes Process look flows up one frame at a time with Track
	// instead of one TrackBatch per receive batch: the baseline that the
	// benchmarks and the batch-equivalence test compare against.
	single bool
	// tun is the (tunnel, VNI) pair of this worker's last new flow and
	// tunNum its number (valid iff tunOK): see tunnelNumber.
	tun    tunnelID
	tunNum uint32
	tunOK  bool
	// inserted is set when this worker added a flow during the current
	// batch: a later frame of the batch that missed in TrackBatch may be
	// that flow (a retransmitted SYN, the server's answer), so its miss is
	// checked again with Track before it counts.
	inserted bool

	// reclaimAfter: no reclaim scan before this time; set when a scan of a
	// full table found nothing expired (see reclaim).
	reclaimAfter int64

	icmpOut tokenBucket // ICMP errors to the outside (icmpOutAllowed)
	icmpPod tokenBucket // ICMP errors to pods (icmpPodAllowed)

	// One receive batch: a decode and plan per frame, and a flow lookup
	// per frame that needs one. Fixed arrays: a batch allocates nothing.
	frames [conntrack.MaxBatch]frame
	lks    [conntrack.MaxBatch]conntrack.Lookup
}

// frame is one frame of a batch and what the first pass decided for it.
type frame struct {
	pk     Parsed
	in     []byte    // the received frame
	out    []byte    // the caller's output buffer
	hop    route.Hop // forward: the next hop towards the destination
	n      int       // forward: length of the frame to send
	ni     int32     // forward: index of the sending node
	policy int32     // forward: the pod's policy
	op     uint8     // stepDone, stepForward or stepReply
	later  bool      // IPv4 later fragment: follows the fragment table, no lookup
	isErr  bool      // reply: an ICMP error from outside, looked up by its quote
	picked bool      // forward: pick is set (prefetchNewFlows)
	pick   int32     // forward: the index of the flow's egress IP in its policy's list
	lk     uint8     // index of the frame's lookup in Worker.lks (iff op != stepDone && !later)
}

// Plans of a frame.
const (
	stepDone    uint8 = iota // the result is final after the first pass
	stepForward              // pod → outside, finished after the lookup
	stepReply                // outside → pod, finished after the lookup
)

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
//
// Frames are taken conntrack.MaxBatch at a time in three passes: decode and
// check every frame up to its flow lookup, look all of them up with one
// TrackBatch (their cache misses overlap), then finish every frame in order.
// The results are those of processing the frames one by one.
func (w *Worker) Process(now int64, in, out [][]byte, res []Result) {
	if len(in) == 0 {
		return
	}
	st := w.p.state.Load()
	_ = out[len(in)-1]
	_ = res[len(in)-1]
	w.reclaim(now, len(in))
	if w.single {
		for i, f := range in {
			res[i] = w.processOne(st, now, f, out[i])
		}
	} else {
		for len(in) > 0 {
			k := min(len(in), conntrack.MaxBatch)
			w.batch(st, now, in[:k], out[:k], res[:k])
			in, out, res = in[k:], out[k:], res[k:]
		}
	}
	w.stats.publish()
}

// ProcessOne handles a single frame; Process is the batched form.
func (w *Worker) ProcessOne(now int64, in, out []byte) Result {
	w.reclaim(now, 1)
	r := w.processOne(w.p.state.Load(), now, in, out)
	w.stats.publish()
	return r
}

// processOne is the one-frame path: prepare, Track, finish.
func (w *Worker) processOne(st *installed, now int64, in, out []byte) Result {
	fr, l := &w.frames[0], &w.lks[0]
	fr.in, fr.out = in, out
	r := w.prepare(st, now, fr, l)
	if fr.op == stepDone {
		return r
	}
	if !fr.later {
		l.Hit = w.ct.Track(l.Dir, &l.Key, l.Flags, now, &l.Flow)
	}
	return w.finish(st, now, fr, l)
}

// batch processes at most conntrack.MaxBatch frames. Only the lookup is
// batched: everything that depends on an earlier frame of the batch (the
// fragment table, a flow the batch created, the ICMP rate limit to the
// outside) happens in the last pass, in frame order. The first pass's ICMP
// errors to pods are in frame order among themselves.
func (w *Worker) batch(st *installed, now int64, in, out [][]byte, res []Result) {
	_ = out[len(in)-1]
	_ = res[len(in)-1]
	nl, pending := 0, 0
	for i, f := range in {
		fr := &w.frames[i]
		fr.in, fr.out = f, out[i]
		r := w.prepare(st, now, fr, &w.lks[nl])
		if fr.op == stepDone {
			res[i] = r
			continue
		}
		pending++
		if !fr.later {
			fr.lk = uint8(nl)
			nl++
		}
	}
	if pending == 0 {
		return
	}
	if w.ct.TrackBatch(w.lks[:nl], now) < nl {
		w.prefetchNewFlows(st, in)
	}
	w.inserted = false
	for i := range in {
		fr := &w.frames[i]
		if fr.op == stepDone {
			continue
		}
		var l *conntrack.Lookup
		if !fr.later {
			l = &w.lks[fr.lk]
			if !l.Hit && w.inserted {
				l.Hit = w.ct.Track(l.Dir, &l.Key, l.Flags, now, &l.Flow)
			}
		}
		res[i] = w.finish(st, now, fr, l)
	}
	w.inserted = false
}

func (w *Worker) drop(r DropReason) Result {
	w.stats.local.Drops[r]++
	return Result{Verdict: VerdictDrop, Reason: r}
}

func (w *Worker) pass() Result {
	w.stats.local.Counters[CounterPass]++
	return Result{Verdict: VerdictPass}
}

// prepare decodes frame in into pk and takes it as far as it goes without
// the flow table. If s.op is stepDone on return, the Result is final;
// otherwise the frame needs finish, after looking up l (filled here) unless
// s.later.
func (w *Worker) prepare(st *installed, now int64, fr *frame, l *conntrack.Lookup) Result {
	w.stats.local.Counters[CounterRx]++
	fr.op, fr.later, fr.isErr, fr.picked = stepDone, false, false, false
	pk := &fr.pk
	pk.Decode(fr.in)
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
		return w.forwardPrepare(st, now, fr, l)
	default: // KindIP
		if st == nil {
			return w.pass()
		}
		if !st.snap.hosted.has(&pk.Dst) {
			return w.pass()
		}
		return w.replyPrepare(fr, l)
	}
}

// finish completes a frame that prepare left pending; l is its lookup
// (nil for a later fragment).
func (w *Worker) finish(st *installed, now int64, fr *frame, l *conntrack.Lookup) Result {
	if fr.op == stepForward {
		return w.forwardFinish(st, now, fr, l)
	}
	return w.replyFinish(st, now, fr, l)
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

// prefetchNewFlows starts loading, for every pod frame of the batch whose
// lookup missed and that may open a flow, the index line of the reply tuple
// its NAT port check (Allocate's ReplyInUse) will most likely ask about:
// the egress IP the flow hash picks, with the pod's own source port. On a
// big table that line is a cache miss per new flow, as long as a lookup's;
// prefetched for the whole batch first, the misses overlap as TrackBatch's
// do. It is only a hint: a wrong guess (another port, the flow exists after
// all) costs a wasted load, never a different result. It keeps each flow's
// egress IP choice for newFlow.
func (w *Worker) prefetchNewFlows(st *installed, in [][]byte) {
	var r conntrack.Tuple
	for i := range in {
		fr := &w.frames[i]
		if fr.op != stepForward || fr.later {
			continue
		}
		l := &w.lks[fr.lk]
		if l.Hit || !opensFlow(&l.Key, l.Flags) {
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
		w.ct.Prefetch(&r)
	}
}

// forwardPrepare checks a decapsulated pod packet up to its flow lookup:
// anti-spoof, policy, TTL, route and size (a packet that cannot leave must
// not create a flow), then the lookup key.
func (w *Worker) forwardPrepare(st *installed, now int64, s *frame, l *conntrack.Lookup) Result {
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
			return w.drop(DropUnknownVTEP)
		}
		ni = *nip
		if !ok || pod.node != ni {
			return w.drop(DropSpoofedSource)
		}
	}
	if pod.policy < 0 {
		return w.drop(DropNotSelected)
	}
	if pk.Frag && pk.IPVer == 6 {
		return w.drop(DropIPv6Fragment)
	}
	if pk.TTL <= 1 {
		return w.icmpToPod(st, pk, now, ni, in, out, icmpTimeExceeded, 0, DropTTLExpired)
	}
	if snap.routes.Lookup(&pk.Dst, &s.hop) != route.Found {
		return w.drop(DropNoRoute)
	}
	ipLen := pk.End - pk.L3
	if ipLen > s.hop.MTU {
		if pk.IPVer == 4 && !header.IPv4(in[pk.L3:]).Fixed().DontFragment() {
			return w.drop(DropMTUExceeded) // DF clear: a router would fragment; we do not
		}
		return w.icmpToPod(st, pk, now, ni, in, out, icmpTooBig, s.hop.MTU, DropMTUExceeded)
	}
	s.n = header.EthernetLen + ipLen
	if s.n > len(out) {
		return w.drop(DropOutBuffer)
	}
	s.ni, s.policy = ni, pod.policy
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
	switch pk.Proto {
	case header.ProtoTCP, header.ProtoUDP:
		if !pk.HasL4 {
			return w.drop(DropMalformed)
		}
		t.SrcPort, t.DstPort = pk.SrcPort, pk.DstPort
		if pk.Proto == header.ProtoTCP {
			l.Flags = pk.TCPFlags
		}
	case header.ProtoICMPv4, header.ProtoICMPv6:
		if !pk.HasL4 {
			return w.drop(DropMalformed)
		}
		if !pk.ICMPEcho || (pk.ICMPType != header.ICMPv4EchoRequest && pk.ICMPType != header.ICMPv6EchoRequest) {
			return w.drop(DropICMPType)
		}
		t.SrcPort, t.DstPort = pk.ICMPID, 0
	default:
		return w.drop(DropUnsupportedProto)
	}
	s.op = stepForward
	return Result{}
}

// forwardFinish takes a pod packet to the outside once its flow is looked
// up: a miss becomes a new flow; then the NAT rewrite.
func (w *Worker) forwardFinish(st *installed, now int64, s *frame, l *conntrack.Lookup) Result {
	pk, in, out := &s.pk, s.in, s.out
	var natAddr [16]byte
	var natPort uint16
	if s.later {
		e := w.frags.lookup(fragOut, &pk.Src, &pk.Dst, pk.FragID, pk.Proto, now)
		if e == nil {
			return w.drop(DropFragNoFirst)
		}
		natAddr = e.addr
	} else {
		if l.Hit && !natCurrent(st, s, &l.Flow) {
			l.Hit = w.retire(st, s, l, now)
		}
		if !l.Hit {
			if r := w.newFlow(st, s, l, now); r != DropNone {
				return w.drop(r)
			}
		}
		natAddr, natPort = [16]byte(l.Flow.NATAddr), l.Flow.NATPort
	}
	n := s.n
	writeEth(out, &s.hop.DstMAC, &s.hop.SrcMAC, pk.IPVer)
	ip, src := out[header.EthernetLen:n], in[pk.L3:pk.End]
	if s.later {
		copy(ip, src)
		decTTL(ip, pk.IPVer)
		header.IPv4(ip).Fixed().SetSrcAddrWithChecksumUpdate([4]byte(natAddr[12:]))
	} else {
		rewriteNAT(ip, src, pk, srcSide, &natAddr, natPort)
		if pk.Frag && pk.IPVer == 4 {
			w.frags.add(fragOut, &pk.Src, &pk.Dst, pk.FragID, pk.Proto, now, &natAddr, 0)
		}
	}
	w.stats.local.Counters[CounterForwarded]++
	return Result{Verdict: VerdictTx, Ifindex: s.hop.Ifindex, Len: n}
}

// natCurrent reports whether flow f's egress IP is still one of the IPs of
// frame s's pod's policy hosted here, for the packet's family. Pick keeps a
// flow on its IP for life; this is what ends that life when the IP leaves.
func natCurrent(st *installed, s *frame, f *conntrack.Flow) bool {
	for _, ip := range st.snap.policies[s.policy].ips[fam(s.pk.IPVer)] {
		if ip == nat.Addr(f.NATAddr) {
			return true
		}
	}
	return false
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
// current flow.
func (w *Worker) retire(st *installed, s *frame, l *conntrack.Lookup, now int64) bool {
	natAddr, natPort := l.Flow.NATAddr, l.Flow.NATPort
	if w.ct.Track(conntrack.Original, &l.Key, l.Flags, now, &l.Flow) {
		if natCurrent(st, s, &l.Flow) {
			return true
		}
		natAddr, natPort = l.Flow.NATAddr, l.Flow.NATPort
	}
	var gone conntrack.Flow
	if w.ct.DeleteBinding(&l.Key, natAddr, natPort, &gone) {
		w.releaseFlow(&gone)
		w.stats.local.Counters[CounterFlowsMoved]++
	}
	return false
}

// opensFlow reports whether a pod packet with tuple t and TCP flags may
// open a flow: any UDP or ICMP echo, and TCP only with a bare SYN.
func opensFlow(t *conntrack.Tuple, flags uint8) bool {
	const f = conntrack.FlagSYN | conntrack.FlagACK | conntrack.FlagRST | conntrack.FlagFIN
	return t.Proto != header.ProtoTCP || flags&f == conntrack.FlagSYN
}

// newFlow allocates a NAT binding for frame s's lookup l.Key and inserts
// the flow into l.Flow. It returns DropNone on success.
func (w *Worker) newFlow(st *installed, s *frame, l *conntrack.Lookup, now int64) DropReason {
	pk, ni, policy := &s.pk, s.ni, s.policy
	t, flags := &l.Key, l.Flags
	if !opensFlow(t, flags) {
		return DropTCPNoFlow
	}
	if st.snap.hosted.has(&pk.Dst) {
		// Checked only here: no flow to a hosted egress IP is ever created,
		// so established traffic needs no hairpin lookup.
		return DropHairpin
	}
	ips := st.snap.policies[policy].ips[fam(pk.IPVer)]
	if len(ips) == 0 {
		return DropNoEgressIP
	}
	tn, ok := w.tunnelNumber(tunnelID{pk.Tunnel, pk.VNI})
	if !ok {
		return DropTunnelIDs
	}
	src, dst := nat.Addr(t.Src), nat.Addr(t.Dst)
	pick := int(s.pick)
	if !s.picked {
		pick = nat.Pick(ips, nat.FlowHash(t.Proto, src, t.SrcPort, dst, t.DstPort))
	}
	natAddr := ips[pick]
	port, err := w.alloc.Allocate(t.Proto, src, t.SrcPort, dst, t.DstPort, natAddr, w.random())
	if err != nil {
		return DropNATExhausted
	}
	f := &l.Flow
	*f = conntrack.Flow{Orig: *t, NATAddr: conntrack.Addr(natAddr), NATPort: port,
		Aux: packAux(st.vtepOfNode[ni], tn)}
	err = w.ct.Insert(f, flags, now)
	if err == nil {
		w.inserted = true
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

// replyPrepare checks a packet from the outside to a hosted egress IP up to
// its flow lookup and builds the key: the reply tuple, or for an ICMP error
// the reply tuple of the packet it quotes.
func (w *Worker) replyPrepare(s *frame, l *conntrack.Lookup) Result {
	pk := &s.pk
	if pk.Frag && pk.IPVer == 6 {
		return w.drop(DropIPv6Fragment)
	}
	if pk.TTL <= 1 {
		return w.drop(DropTTLExpired)
	}
	if pk.Frag && pk.FragOff != 0 {
		s.op, s.later = stepReply, true
		return Result{}
	}
	t := &l.Key
	l.Dir, l.Flags = conntrack.Reply, 0
	switch pk.Proto {
	case header.ProtoTCP, header.ProtoUDP:
		if !pk.HasL4 {
			return w.drop(DropMalformed)
		}
		*t = conntrack.Tuple{Src: conntrack.Addr(pk.Src), Dst: conntrack.Addr(pk.Dst), SrcPort: pk.SrcPort, DstPort: pk.DstPort, Proto: pk.Proto}
		if pk.Proto == header.ProtoTCP {
			l.Flags = pk.TCPFlags
		}
	case header.ProtoICMPv4, header.ProtoICMPv6:
		if !pk.HasL4 {
			return w.drop(DropMalformed)
		}
		switch {
		case pk.ICMPEcho && (pk.ICMPType == header.ICMPv4EchoReply || pk.ICMPType == header.ICMPv6EchoReply):
			*t = conntrack.Tuple{Src: conntrack.Addr(pk.Src), Dst: conntrack.Addr(pk.Dst), SrcPort: 0, DstPort: pk.ICMPID, Proto: pk.Proto}
		case pk.ICMPErr:
			if pk.EmbSrc != pk.Dst {
				return w.drop(DropNoFlow) // quotes a packet we did not send
			}
			*t = conntrack.Tuple{Src: conntrack.Addr(pk.EmbDst), Dst: conntrack.Addr(pk.EmbSrc), SrcPort: pk.EmbDstPort, DstPort: pk.EmbSrcPort, Proto: pk.EmbProto}
			s.isErr = true
		case pk.ICMPEcho:
			return w.drop(DropNoFlow) // echo request to an egress IP: unsolicited
		default:
			return w.drop(DropICMPType)
		}
	default:
		return w.drop(DropUnsupportedProto)
	}
	s.op = stepReply
	return Result{}
}

// replyFinish takes a packet from the outside back to its pod once its flow
// is looked up.
func (w *Worker) replyFinish(st *installed, now int64, s *frame, l *conntrack.Lookup) Result {
	pk, in, out := &s.pk, s.in, s.out
	var podAddr [16]byte
	var podPort uint16
	var aux uint32
	if s.later {
		e := w.frags.lookup(fragIn, &pk.Src, &pk.Dst, pk.FragID, pk.Proto, now)
		if e == nil {
			return w.drop(DropFragNoFirst)
		}
		podAddr, aux = e.addr, e.aux
	} else {
		if !l.Hit {
			return w.drop(DropNoFlow)
		}
		podAddr, podPort, aux = [16]byte(l.Flow.Orig.Src), l.Flow.Orig.SrcPort, l.Flow.Aux
	}

	vi, tn := unpackAux(aux)
	tid := w.p.tunnels.ids[tn]
	if int(vi) >= len(st.nodeOfVTEP) || st.nodeOfVTEP[vi] < 0 {
		return w.drop(DropUnknownNode)
	}
	node := &st.snap.nodes[st.nodeOfVTEP[vi]]
	if st.snap.routes.Lookup(&node.vtep, &w.hop) != route.Found {
		return w.drop(DropNoRoute)
	}
	ipLen := pk.End - pk.L3
	hl := encapLen(node.fam)
	if mtu := w.hop.MTU - (hl - header.EthernetLen); ipLen > mtu {
		// Too big for the tunnel once encapsulated. A router answers the
		// sender so its PMTU discovery works; it never answers an ICMP
		// error, a later fragment, or IPv4 without DF, which a router
		// would fragment: the gateway does not, it drops and counts.
		if s.isErr || s.later || (pk.IPVer == 4 && !header.IPv4(in[pk.L3:]).Fixed().DontFragment()) {
			return w.drop(DropMTUExceeded)
		}
		return w.tooBigToOutside(st, pk, now, in, out, mtu)
	}
	n := hl + ipLen
	if n > len(out) {
		return w.drop(DropOutBuffer)
	}
	ip, src := out[hl:n], in[pk.L3:pk.End]
	switch {
	case s.later:
		copy(ip, src)
		decTTL(ip, pk.IPVer)
		header.IPv4(ip).Fixed().SetDstAddrWithChecksumUpdate([4]byte(podAddr[12:]))
	case s.isErr:
		copy(ip, src)
		decTTL(ip, pk.IPVer)
		xlateICMPError(ip, pk, &podAddr, podPort)
		w.stats.local.Counters[CounterICMPXlated]++
	default:
		rewriteNAT(ip, src, pk, dstSide, &podAddr, podPort)
		if pk.Frag && pk.IPVer == 4 {
			w.frags.add(fragIn, &pk.Src, &pk.Dst, pk.FragID, pk.Proto, now, &podAddr, aux)
		}
	}
	writeEncap(out[:n], node, tid.kind, tid.vni, &w.hop, pk.IPVer, entropy(&podAddr, podPort, &pk.Src))
	w.stats.local.Counters[CounterReplied]++
	return Result{Verdict: VerdictTx, Ifindex: w.hop.Ifindex, Len: n}
}

// reclaimBackoff is how long a worker leaves a full table alone after a
// reclaim scan found nothing expired in it: a table full of live flows must
// not cost a scan per batch.
const reclaimBackoff = int64(10 * time.Millisecond)

// reclaim makes room before a call that may open n flows when the table
// has fewer than n free: it removes up to n expired flows that the periodic
// sweep (Expire) has not reached yet, with Expire's bounded work, so that a
// table full of dead flows does not refuse live ones (conntrack_full is for
// a table full of live flows). It runs once per Process call, before any
// frame is looked up, so the batched and the one-frame path see the same
// table.
func (w *Worker) reclaim(now int64, n int) {
	if w.ct.Len() <= w.ct.Cap()-n || now < w.reclaimAfter {
		return
	}
	got := w.ct.Expire(now, n, w.release)
	w.stats.local.Counters[CounterFlowsExpired] += uint64(got)
	if got == 0 {
		w.reclaimAfter = now + reclaimBackoff
	}
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
