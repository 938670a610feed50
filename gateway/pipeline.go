package gateway

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/gateway/natlog"
	"github.com/egret-gw/egret/nat"
)

// Verdict is what the caller does with a frame after Process.
type Verdict uint8

const (
	// VerdictDrop: discard the frame; Result.Reason says why.
	VerdictDrop Verdict = iota
	// VerdictTx: send out[:Result.Len] out of interface Result.Ifindex.
	VerdictTx
	// VerdictPass: hand the input frame, unchanged, to the kernel.
	VerdictPass
)

// String names the verdict.
func (v Verdict) String() string {
	switch v {
	case VerdictDrop:
		return "drop"
	case VerdictTx:
		return "tx"
	case VerdictPass:
		return "pass"
	}
	return "unknown"
}

// Result is the outcome for one frame.
type Result struct {
	Verdict Verdict
	Reason  DropReason // valid iff Verdict == VerdictDrop
	Ifindex int        // valid iff Verdict == VerdictTx
	Len     int        // valid iff Verdict == VerdictTx: bytes written to the output buffer
}

// MaxVTEPs bounds how many distinct node VTEP addresses a pipeline ever
// interns (the index is kept in a flow's Aux, so it must outlive snapshots).
const MaxVTEPs = 1 << vtepBits

// installed is a snapshot plus the pipeline's stable VTEP numbering for it.
type installed struct {
	snap       *Snapshot
	vtepOfNode []uint32 // snapshot node index → interned VTEP index
	nodeOfVTEP []int32  // interned VTEP index → snapshot node index, -1 if gone
}

// Pipeline is the shared part of the data plane: the flow table, the NAT
// allocator and the current configuration. Processors do the packet work.
type Pipeline struct {
	ct    *conntrack.Table
	alloc *nat.Allocator
	state atomic.Pointer[installed]

	mu         sync.Mutex // guards the fields below (swaps and processor creation only)
	intern     map[[16]byte]uint32
	vteps      [][16]byte // interned VTEP addresses by index
	processors []*Processor

	tunnels tunnelTable // (tunnel, VNI) numbers for flows' return paths

	drops  dropSampler // who samples dropped frames (dropsample.go)
	natlog *natlog.Log // nil: no NAT log
}

// ctInUse lets the NAT allocator ask the flow table about reply tuples.
type ctInUse struct{ t *conntrack.Table }

func (c ctInUse) ReplyInUse(proto uint8, remote nat.Addr, remotePort uint16, natAddr nat.Addr, natPort uint16) bool {
	k := conntrack.Tuple{Src: conntrack.Addr(remote), Dst: conntrack.Addr(natAddr), SrcPort: remotePort, DstPort: natPort, Proto: proto}
	return c.t.ReplyInUse(&k)
}

// NewPipeline returns a pipeline on flow table ct with a NAT allocator built
// from natCfg. It forwards nothing until Swap installs a snapshot.
func NewPipeline(ct *conntrack.Table, natCfg nat.Config) (*Pipeline, error) {
	if ct == nil {
		return nil, errors.New("gateway: NewPipeline needs a conntrack table")
	}
	a, err := nat.NewAllocator(natCfg, ctInUse{ct})
	if err != nil {
		return nil, err // nat's error says what is wrong with the NAT configuration
	}
	return &Pipeline{ct: ct, alloc: a, intern: make(map[[16]byte]uint32)}, nil
}

// SetNATLog has the processors made from now on record every binding they
// create and end in l, each through a ring of its own; call it before
// NewProcessor. Adoptions are recorded by whoever adopts (gateway/flowsync).
func (p *Pipeline) SetNATLog(l *natlog.Log) {
	p.mu.Lock()
	p.natlog = l
	p.mu.Unlock()
}

// NATLog returns the log SetNATLog set, nil if none.
func (p *Pipeline) NATLog() *natlog.Log {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.natlog
}

// NAT returns the pipeline's allocator (for port-use metrics).
func (p *Pipeline) NAT() *nat.Allocator { return p.alloc }

// Conntrack returns the pipeline's flow table.
func (p *Pipeline) Conntrack() *conntrack.Table { return p.ct }

// Swap installs s as the configuration all processors use from their next
// batch on. Flows are kept: a flow whose pod's node left the configuration
// has its replies dropped (DropUnknownNode) until it expires or the node
// returns.
func (p *Pipeline) Swap(s *Snapshot) error {
	if s == nil {
		return errors.New("gateway: Swap needs a snapshot")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// The accepted pairs are numbered before any processor sees the
	// snapshot: packets only look numbers up, so only configuration can
	// use them up.
	for _, id := range s.tunnels {
		if _, ok := p.tunnels.number(id); !ok {
			return fmt.Errorf("gateway: more than %d distinct (tunnel type, VNI) pairs configured over this gateway's life; restart the gateway to renumber", MaxTunnelIDs)
		}
	}
	in := &installed{snap: s, vtepOfNode: make([]uint32, len(s.nodes))}
	for i := range s.nodes {
		idx, ok := p.intern[s.nodes[i].vtep]
		if !ok {
			if len(p.intern) >= MaxVTEPs {
				return fmt.Errorf("gateway: more than %d distinct node VTEPs seen; restart the gateway to renumber", MaxVTEPs)
			}
			idx = p.internVTEP(s.nodes[i].vtep)
		}
		in.vtepOfNode[i] = idx
	}
	in.nodeOfVTEP = make([]int32, len(p.intern))
	for i := range in.nodeOfVTEP {
		in.nodeOfVTEP[i] = -1
	}
	for i, v := range in.vtepOfNode {
		in.nodeOfVTEP[v] = int32(i)
	}
	p.state.Store(in)
	return nil
}

// Snapshot returns the installed configuration, nil before the first Swap.
func (p *Pipeline) Snapshot() *Snapshot {
	if in := p.state.Load(); in != nil {
		return in.snap
	}
	return nil
}

// Stats sums the counters of all processors.
func (p *Pipeline) Stats() Stats {
	p.mu.Lock()
	ps := p.processors
	p.mu.Unlock()
	var s, one Stats
	for _, pr := range ps {
		pr.stats.read(&one)
		s.Add(&one)
	}
	return s
}
