package gateway

// Flows handed over between processes: replicated to a standby gateway
// (gateway/flowsync) or left to the next process in a state file. A flow's
// Aux holds numbers only this pipeline knows (returnpath.go), so it leaves
// as a ReturnPath and comes back in through Adopt, which numbers it anew.

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/egret-gw/egret/conntrack"
	"github.com/egret-gw/egret/nat"
)

// ReturnPath is a flow's return path in a form any process can read: the
// VTEP of the pod's node and the encapsulation its packets came with.
type ReturnPath struct {
	VTEP   netip.Addr
	Tunnel TunnelVNI
}

// Errors of Adopt besides conntrack's (ErrFull, ErrExists).
var (
	// ErrPortTaken means the flow's NAT port is bound to another flow here.
	ErrPortTaken = errors.New("the flow's NAT port is taken here")
	// ErrReturnPath means the flow's return path cannot be numbered here:
	// its encapsulation is not accepted, or too many node VTEPs were seen.
	ErrReturnPath = errors.New("the flow's return path is unknown here")
)

// internVTEP returns v's interned index, interning it if new; p.mu must be
// held and the caller must check MaxVTEPs first.
func (p *Pipeline) internVTEP(v [16]byte) uint32 {
	if idx, ok := p.intern[v]; ok {
		return idx
	}
	idx := uint32(len(p.vteps))
	p.intern[v] = idx
	p.vteps = append(p.vteps, v)
	return idx
}

// ReturnPath returns the portable form of a flow's Aux; false if aux holds
// numbers this pipeline never gave.
func (p *Pipeline) ReturnPath(aux uint32) (ReturnPath, bool) {
	vi, tn := unpackAux(aux)
	if tn >= p.tunnels.count.Load() {
		return ReturnPath{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if int(vi) >= len(p.vteps) {
		return ReturnPath{}, false
	}
	id := p.tunnels.ids[tn]
	v := p.vteps[vi]
	if st := p.state.Load(); st != nil && st.snap.localNode >= 0 {
		if ln := &st.snap.nodes[st.snap.localNode]; v == ln.vtep && st.snap.hasVTEP[ln.fam] {
			// Seen from anywhere else, the local node is reached at
			// this gateway's own VTEP.
			v = st.snap.vtep[ln.fam]
		}
	}
	return ReturnPath{VTEP: netip.AddrFrom16(v).Unmap(), Tunnel: TunnelVNI{Tunnel: id.kind, VNI: id.vni}}, true
}

// fromPortable maps a portable return path's VTEP to this pipeline's: a
// flow of a pod on this gateway's own node (a peer reached it at one of
// our VTEPs) comes back through the local port.
func (p *Pipeline) fromPortable(v [16]byte) [16]byte {
	st := p.state.Load()
	if st == nil || st.snap.localNode < 0 {
		return v
	}
	for f := range st.snap.vtep {
		if st.snap.hasVTEP[f] && st.snap.vtep[f] == v {
			return st.snap.nodes[st.snap.localNode].vtep
		}
	}
	return v
}

// Adopt adds f, a flow made by another gateway or by this gateway's previous
// process, with its state, its NAT binding and the return path rp, for the
// given remaining lifetime; f.Aux is ignored. Its port is claimed from the
// NAT allocator, so no flow made here takes it. A flow adopted for an egress
// IP this gateway does not host answers nothing (packets to that IP do not
// reach the pipeline) until the IP is hosted: then it is live as it stands.
// Replies to a node the installed configuration does not list are dropped
// (DropUnknownNode) until a configuration lists it.
func (p *Pipeline) Adopt(f *conntrack.Flow, rp ReturnPath, remaining time.Duration, now int64) error {
	if !rp.VTEP.IsValid() {
		return fmt.Errorf("%w: no VTEP", ErrReturnPath)
	}
	tn, ok := p.tunnels.find(tunnelID{rp.Tunnel.Tunnel, rp.Tunnel.VNI}.key())
	if !ok {
		return fmt.Errorf("%w: tunnel %d VNI %d is not accepted", ErrReturnPath, rp.Tunnel.Tunnel, rp.Tunnel.VNI)
	}
	v := p.fromPortable(rp.VTEP.Unmap().As16())
	p.mu.Lock()
	if _, known := p.intern[v]; !known && len(p.intern) >= MaxVTEPs {
		p.mu.Unlock()
		return fmt.Errorf("%w: more than %d node VTEPs", ErrReturnPath, MaxVTEPs)
	}
	vi := p.internVTEP(v)
	p.mu.Unlock()
	g := *f
	g.Aux = packAux(vi, tn)
	o := &g.Orig
	if !p.alloc.Claim(o.Proto, nat.Addr(o.Src), o.SrcPort, nat.Addr(o.Dst), o.DstPort, nat.Addr(g.NATAddr), g.NATPort) {
		return ErrPortTaken
	}
	if err := p.ct.ImportFlow(&g, remaining, now); err != nil {
		p.alloc.Release(o.Proto, nat.Addr(o.Src), o.SrcPort, nat.Addr(o.Dst), o.DstPort, nat.Addr(g.NATAddr), g.NATPort)
		return err
	}
	return nil
}

// Abandon removes the flow with f's original tuple and NAT binding and
// releases its port; false if no such flow is held.
func (p *Pipeline) Abandon(f *conntrack.Flow) bool {
	var gone conntrack.Flow
	if !p.ct.DeleteBinding(&f.Orig, f.NATAddr, f.NATPort, &gone) {
		return false
	}
	o := &gone.Orig
	p.alloc.Release(o.Proto, nat.Addr(o.Src), o.SrcPort, nat.Addr(o.Dst), o.DstPort, nat.Addr(gone.NATAddr), gone.NATPort)
	return true
}
