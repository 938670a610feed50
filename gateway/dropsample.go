package gateway

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/natlog"
)

// Drop sampling: a rate-limited copy of what the processors decoded of the
// frames they drop, for `egret flows --drops` and the gateway agent's
// EgressDestinationDenied Events. It is off the packet path: a processor
// loads one word per Process call (the union of the reasons anybody
// listens for), and only when that is non-zero does it look at its
// results. A sampled drop then passes each listener's rate limit (one
// compare-and-swap) and a non-blocking channel send: a listener that reads
// too slowly loses samples, counted, and never holds a worker up.

// The sampler keeps one bit per reason in a word.
const _ = uint64(1) << (numDropReasons - 1)

// DropSample is one dropped frame as the processor had decoded it when it
// dropped it. Fields the decoding did not reach are zero: a malformed
// frame may have only its Reason and Len.
type DropSample struct {
	// Time is when the frame was dropped.
	Time time.Time
	// Reason is why; its String is the reason label of
	// egret_gateway_dropped_packets_total.
	Reason DropReason
	// Len is the frame's length on the wire, in bytes.
	Len int
	// Local is set for a frame of a pod on the gateway's own node, which
	// came through the local port rather than a tunnel.
	Local bool
	// Tunnel, VNI, OuterSrc and OuterDst are the encapsulation and its
	// endpoints (the sending node's VTEP and the gateway's); valid iff
	// Tunnel != TunnelNone.
	Tunnel             Tunnel
	VNI                uint32
	OuterSrc, OuterDst netip.Addr
	// Proto is the transport protocol (6 TCP, 17 UDP, 1 ICMP, 58 ICMPv6);
	// Src and Dst the (inner) IP addresses: valid iff Src.IsValid().
	Proto    uint8
	Src, Dst netip.Addr
	// SrcPort and DstPort are TCP's or UDP's ports; valid iff HasPorts.
	SrcPort, DstPort uint16
	HasPorts         bool
	// ICMPType and ICMPCode are valid iff HasICMP.
	ICMPType, ICMPCode uint8
	HasICMP            bool
	// Pod is the sending pod when the frame came from one the
	// configuration names.
	Pod natlog.Pod
}

// DropSubscription receives samples of the drops it asked for, at most
// its rate. Close it when done: until every subscription is closed the
// processors keep looking at their results.
type DropSubscription struct {
	// C delivers the samples. Close closes it.
	C <-chan DropSample

	ch       chan DropSample
	mask     uint64
	interval int64        // ns between samples at the sustained rate
	slack    int64        // ns of burst: (burst-1) intervals
	tat      atomic.Int64 // GCRA's theoretical arrival time of the next sample
	lost     atomic.Uint64
	s        *dropSampler

	mu     sync.RWMutex // senders hold it shared; Close exclusively
	closed bool
}

// dropSampler is a pipeline's set of subscriptions.
type dropSampler struct {
	// mask is the union of the subscriptions' reasons: 0 when nobody
	// listens, the one load a processor pays then.
	mask atomic.Uint64
	subs atomic.Pointer[[]*DropSubscription]
	mu   sync.Mutex // serialises changes of subs
	lost atomic.Uint64
}

// SubscribeDrops starts sampling the drops of the given reasons (every
// reason when none are given) for a new subscription: at most perSecond
// samples a second on average, in bursts of at most perSecond, delivered
// on a channel of buffer samples (at least 1). Samples that find the
// channel full are lost and counted (DropSubscription.Lost,
// Pipeline.DropSamplesLost).
func (p *Pipeline) SubscribeDrops(perSecond, buffer int, reasons ...DropReason) *DropSubscription {
	perSecond, buffer = max(perSecond, 1), max(buffer, 1)
	var mask uint64
	for _, r := range reasons {
		if r > DropNone && r < numDropReasons {
			mask |= 1 << r
		}
	}
	if len(reasons) == 0 {
		mask = (1<<numDropReasons - 1) &^ 1
	}
	ch := make(chan DropSample, buffer)
	interval := int64(time.Second) / int64(perSecond)
	sub := &DropSubscription{C: ch, ch: ch, mask: mask, interval: interval, slack: int64(perSecond-1) * interval, s: &p.drops}
	sub.tat.Store(-1 << 62) // the first sample is due whatever the clock's origin
	p.drops.change(func(subs []*DropSubscription) []*DropSubscription { return append(subs, sub) })
	return sub
}

// Lost returns how many samples this subscription lost because its
// channel was full.
func (s *DropSubscription) Lost() uint64 { return s.lost.Load() }

// Close ends the subscription and closes C. It may be called more than once.
func (s *DropSubscription) Close() {
	s.s.change(func(subs []*DropSubscription) []*DropSubscription {
		out := subs[:0]
		for _, o := range subs {
			if o != s {
				out = append(out, o)
			}
		}
		return out
	})
	// A processor that loaded the list before the change may still offer
	// to s: it sends only under s.mu's read side and not once closed.
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
	s.mu.Unlock()
}

// change replaces the subscription list with edit's result (edit gets a
// copy) and the mask with their union.
func (d *dropSampler) change(edit func([]*DropSubscription) []*DropSubscription) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var cur []*DropSubscription
	if p := d.subs.Load(); p != nil {
		cur = *p
	}
	next := edit(append([]*DropSubscription(nil), cur...))
	var mask uint64
	for _, s := range next {
		mask |= s.mask
	}
	d.subs.Store(&next)
	d.mask.Store(mask)
}

// due reports whether a sample at now (monotonic ns) fits the rate: GCRA,
// one compare-and-swap shared by every processor.
func (s *DropSubscription) due(now int64) bool {
	for {
		tat := s.tat.Load()
		t := max(tat, now)
		if t-now > s.slack {
			return false
		}
		if s.tat.CompareAndSwap(tat, t+s.interval) {
			return true
		}
	}
}

// send delivers smp unless the channel is full (counted) or closed.
func (s *DropSubscription) send(smp *DropSample) {
	s.mu.RLock()
	if !s.closed {
		select {
		case s.ch <- *smp:
		default:
			s.lost.Add(1)
			s.s.lost.Add(1)
		}
	}
	s.mu.RUnlock()
}

// DropSamplesLost returns how many drop samples the subscriptions of p
// lost together because their readers were behind.
func (p *Pipeline) DropSamplesLost() uint64 { return p.drops.lost.Load() }

// sampleDrops offers the drops among res that mask asks for to the
// subscriptions; frames are the batch's input frames, whose decodes are in
// pr.frames. Called once per batch, only while somebody listens.
func (pr *Processor) sampleDrops(st *installed, now int64, mask uint64, frames [][]byte, res []Result) {
	p := pr.p.drops.subs.Load()
	if p == nil {
		return
	}
	for i := range res {
		r := res[i].Reason
		if res[i].Verdict != VerdictDrop || mask>>r&1 == 0 {
			continue
		}
		var smp DropSample
		filled := false
		for _, s := range *p {
			if s.mask>>r&1 == 0 || !s.due(now) {
				continue
			}
			if !filled {
				pr.fillSample(&smp, st, r, &pr.frames[i].pk, len(frames[i]))
				filled = true
			}
			s.send(&smp)
		}
	}
}

// fillSample copies what pk decoded of a frame of n bytes into smp.
func (pr *Processor) fillSample(smp *DropSample, st *installed, r DropReason, pk *Parsed, n int) {
	*smp = DropSample{Time: time.Now(), Reason: r, Len: n, Local: pr.fromLocal}
	if pk.Kind < KindIP {
		return
	}
	if pk.Kind == KindTunnel && !pr.fromLocal {
		smp.Tunnel, smp.VNI = pk.Tunnel, pk.VNI
		smp.OuterSrc = netip.AddrFrom16(pk.OuterSrc).Unmap()
		smp.OuterDst = netip.AddrFrom16(pk.OuterDst).Unmap()
	}
	smp.Proto = pk.Proto
	smp.Src = netip.AddrFrom16(pk.Src).Unmap()
	smp.Dst = netip.AddrFrom16(pk.Dst).Unmap()
	if pk.HasL4 {
		switch pk.Proto {
		case header.ProtoTCP, header.ProtoUDP:
			smp.SrcPort, smp.DstPort, smp.HasPorts = pk.SrcPort, pk.DstPort, true
		case header.ProtoICMPv4, header.ProtoICMPv6:
			smp.ICMPType, smp.ICMPCode, smp.HasICMP = pk.ICMPType, pk.ICMPCode, true
		}
	}
	if pk.Kind == KindTunnel && st != nil {
		smp.Pod = st.snap.podNames.Lookup(smp.Src)
	}
}
