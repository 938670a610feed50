package gateway

import (
	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/natlog"
	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/nat"
)

// Default sizes of a processor's IPv4 fragment table.
const (
	DefaultFragSlots   = 1024
	DefaultFragTimeout = 30e9 // ns: longer than typical reassembly timeouts
)

// Processor does the packet work of one receive queue: Process decodes,
// checks, tracks and rewrites a batch of frames (forward.go and reply.go
// hold the two directions, expire.go the flow expiry). It belongs to one
// goroutine; make one per receive queue with Pipeline.NewProcessor.
type Processor struct {
	p       *Pipeline
	ct      *conntrack.Table
	alloc   *nat.Allocator
	hop     route.Hop // the reply path's next hop and the ICMP errors' (scratch)
	rnd     uint64
	frags   fragTable
	stats   *processorStats
	release func(*conntrack.Flow)

	// natlog is this processor's ring of the NAT log (nil: no log); now
	// is the time of the current batch or expiry, for its end records.
	natlog *natlog.Ring
	now    int64

	// tun is the (tunnel, VNI) pair of this processor's last new flow and
	// tunNum its number (valid iff tunOK): see tunnelNumber.
	tun    tunnelID
	tunNum uint32
	tunOK  bool
	// inserted is set when this processor added a flow during the current
	// batch: a later frame of the batch that missed in TrackBatch may be
	// that flow (a retransmitted SYN, the server's answer), so its miss is
	// checked again with Track before it counts.
	inserted bool

	// fromLocal is set while Process handles frames of the local port
	// (ProcessLocal): only they may come from the local node.
	fromLocal bool

	// reclaimAfter: no reclaim scan before this time; set when a scan of a
	// full table found nothing expired (see reclaim).
	reclaimAfter int64

	icmpOut tokenBucket     // ICMP errors to the outside (icmpOutAllowed)
	icmpPod tokenBucket     // ICMP errors to pods (icmpPodAllowed)
	resets  tcpResetLimiter // RSTs to pods for segments of unknown flows (resetToPod)

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
	policy int32     // forward: the policy of a new flow (the pod's; by destination once chosen, iff dest >= 0)
	fallbk int32     // forward: the pod's own policy (-1: none)
	dest   int32     // forward: the pod's destination table (-1: none)
	chosen bool      // forward: policy was chosen by destination (chooseByDest)
	op     uint8     // stepDone, stepForward or stepReply
	later  bool      // IPv4 later fragment: follows the fragment table, no lookup
	isErr  bool      // reply: an ICMP error from outside, looked up by its quote
	picked bool      // forward: pick is set (prefetchNewFlows)
	pick   int32     // forward: the index of the flow's egress IP in its policy's list
	lk     uint8     // index of the frame's lookup in Processor.lks (iff op != stepDone && !later)
}

// Plans of a frame.
const (
	stepDone    uint8 = iota // the result is final after the first pass
	stepForward              // pod → outside, finished after the lookup
	stepReply                // outside → pod, finished after the lookup
)

// NewProcessor returns a new processor of p; seed varies the NAT port choice
// between processors.
func (p *Pipeline) NewProcessor(seed uint64) *Processor {
	pr := &Processor{p: p, ct: p.ct, alloc: p.alloc, rnd: seed | 1, stats: new(processorStats)}
	pr.frags.init(DefaultFragSlots, DefaultFragTimeout)
	pr.resets.init()
	pr.release = pr.releaseFlow
	p.mu.Lock()
	if p.natlog != nil {
		pr.natlog = p.natlog.NewRing()
	}
	p.processors = append(p.processors, pr)
	p.mu.Unlock()
	return pr
}

// Stats returns this processor's counters as of its last batch.
func (pr *Processor) Stats() Stats {
	var s Stats
	pr.stats.read(&s)
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
func (pr *Processor) Process(now int64, in, out [][]byte, res []Result) {
	pr.fromLocal = false
	pr.process(now, in, out, res)
}

// ProcessLocal is Process for frames of the local port: the only frames
// that may come from the local node (Node.Local), which any other port's
// are refused as.
func (pr *Processor) ProcessLocal(now int64, in, out [][]byte, res []Result) {
	pr.fromLocal = true
	pr.process(now, in, out, res)
	pr.fromLocal = false
}

func (pr *Processor) process(now int64, in, out [][]byte, res []Result) {
	if len(in) == 0 {
		return
	}
	st := pr.p.state.Load()
	pr.now = now
	_ = out[len(in)-1]
	_ = res[len(in)-1]
	pr.reclaim(now, len(in))
	// The drops anybody samples (dropsample.go): while nobody does, this
	// load is all the sampling costs.
	sample := pr.p.drops.mask.Load()
	for len(in) > 0 {
		k := min(len(in), conntrack.MaxBatch)
		pr.batch(st, now, in[:k], out[:k], res[:k])
		if sample != 0 {
			pr.sampleDrops(st, now, sample, in[:k], res[:k])
		}
		in, out, res = in[k:], out[k:], res[k:]
	}
	pr.stats.publish()
}

// batch processes at most conntrack.MaxBatch frames. Only the lookup is
// batched: everything that depends on an earlier frame of the batch (the
// fragment table, a flow the batch created, the ICMP rate limit to the
// outside) happens in the last pass, in frame order. The first pass's ICMP
// errors to pods are in frame order among themselves.
func (pr *Processor) batch(st *installed, now int64, in, out [][]byte, res []Result) {
	_ = out[len(in)-1]
	_ = res[len(in)-1]
	nl, pending := 0, 0
	for i, f := range in {
		fr := &pr.frames[i]
		fr.in, fr.out = f, out[i]
		r := pr.prepare(st, now, fr, &pr.lks[nl])
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
	if pr.ct.TrackBatch(pr.lks[:nl], now) < nl {
		pr.prefetchNewFlows(st, in)
	}
	pr.inserted = false
	for i := range in {
		fr := &pr.frames[i]
		if fr.op == stepDone {
			continue
		}
		var l *conntrack.Lookup
		if !fr.later {
			l = &pr.lks[fr.lk]
			if !l.Hit && pr.inserted {
				// Again, alone (sets l.Hit): with its sequence numbers,
				// which Track would not take.
				pr.ct.TrackBatch(pr.lks[fr.lk:fr.lk+1], now)
			}
		}
		res[i] = pr.finish(st, now, fr, l)
	}
	pr.inserted = false
}

func (pr *Processor) drop(r DropReason) Result {
	pr.stats.local.Drops[r]++
	return Result{Verdict: VerdictDrop, Reason: r}
}

func (pr *Processor) pass() Result {
	pr.stats.local.Counters[CounterPass]++
	return Result{Verdict: VerdictPass}
}

// prepare decodes frame in into pk and takes it as far as it goes without
// the flow table. If s.op is stepDone on return, the Result is final;
// otherwise the frame needs finish, after looking up l (filled here) unless
// s.later.
func (pr *Processor) prepare(st *installed, now int64, fr *frame, l *conntrack.Lookup) Result {
	pr.stats.local.Counters[CounterRx]++
	fr.op, fr.later, fr.isErr, fr.picked = stepDone, false, false, false
	pk := &fr.pk
	pk.Decode(fr.in)
	switch pk.Kind {
	case KindOther:
		return pr.pass()
	case KindMalformed:
		return pr.drop(pk.Bad)
	case KindTunnel:
		if st == nil {
			return pr.drop(DropNoConfig)
		}
		f := fam(pk.OuterVer)
		if !st.snap.hasVTEP[f] || st.snap.vtep[f] != pk.OuterDst {
			return pr.pass()
		}
		if !st.snap.accepts(pk.Tunnel, pk.VNI) {
			return pr.drop(DropTunnelMismatch)
		}
		return pr.forwardPrepare(st, now, fr, l)
	default: // KindIP
		if st == nil {
			return pr.pass()
		}
		if !st.snap.hosted.has(&pk.Dst) {
			return pr.pass()
		}
		return pr.replyPrepare(fr, l)
	}
}

// finish completes a frame that prepare left pending; l is its lookup
// (nil for a later fragment).
func (pr *Processor) finish(st *installed, now int64, fr *frame, l *conntrack.Lookup) Result {
	if fr.op == stepForward {
		return pr.forwardFinish(st, now, fr, l)
	}
	return pr.replyFinish(st, now, fr, l)
}

func fam(ver uint8) uint8 { return (ver >> 1) & 1 } // 4 → 0, 6 → 1

func (pr *Processor) random() uint64 {
	// xorshift64*: cheap, per processor, good enough to spread NAT ports.
	x := pr.rnd
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	pr.rnd = x
	return x * 0x2545f4914f6cdd1d
}
