package gateway

// The local port: pods on the gateway's own node send plain frames to the
// gateway through a veth pair (gateway/config's local.go names it). The
// port wraps each one in the encapsulation a worker would have used, from
// the local node's VTEP (WrapLocal), so that one path checks and tracks
// every pod's packets; replies to that VTEP leave through the port
// unwrapped (UnwrapLocal). Processor.ProcessLocal is the only way in for
// frames of the local node.

import (
	"net/netip"

	"github.com/egret-gw/egret/gateway/header"
	"github.com/egret-gw/egret/gateway/route"
)

// localSport is the outer UDP source port of wrapped frames: they cross no
// network, so nothing needs its entropy.
const localSport = 49152

// WrapLocal turns the frame in buf[off:off+n], a plain Ethernet frame of
// the local port, into the tunnel frame the local node would send, written
// into buf, and returns where it now is. It reports false, leaving buf
// alone, when the installed configuration has no local node, the frame is
// not IPv4 or IPv6, or buf has no room for the headers.
func (p *Pipeline) WrapLocal(buf []byte, off, n int) (int, int, bool) {
	st := p.state.Load()
	if st == nil || st.snap.localNode < 0 || off < 0 || n < header.EthernetLen || off+n > len(buf) {
		return 0, 0, false
	}
	var ver uint8
	switch header.Ethernet(buf[off : off+header.EthernetLen]).Fixed().EtherType() {
	case header.EtherTypeIPv4:
		ver = 4
	case header.EtherTypeIPv6:
		ver = 6
	default:
		return 0, 0, false
	}
	w := &st.snap.localWrap
	// The frame's own Ethernet header becomes the inner one.
	grow := encapLen(w.fam) - header.EthernetLen
	if off < grow {
		if grow+n > len(buf) {
			return 0, 0, false
		}
		copy(buf[grow:grow+n], buf[off:off+n])
		off = grow
	}
	start, end := off-grow, off+n
	hop := route.Hop{SrcMAC: st.snap.nodes[st.snap.localNode].innerMAC, DstMAC: st.snap.innerMAC}
	t := st.snap.tunnels[0]
	writeEncap(buf[start:end], w, t.kind, t.vni, &hop, ver, localSport)
	return start, end - start, true
}

// UnwrapLocal returns where in frame the local port's frame starts: for a
// reply to the local node, its inner Ethernet frame; for a tunnel frame
// addressed to one of the gateway's own VTEPs (another gateway's reply to a
// pod of this node, for the node's kernel: Processor.toLocalKernel), the
// whole frame. False if frame is neither.
func (p *Pipeline) UnwrapLocal(frame []byte) (int, bool) {
	st := p.state.Load()
	if st == nil || st.snap.localNode < 0 {
		return 0, false
	}
	ln := &st.snap.nodes[st.snap.localNode]
	hl := encapLen(ln.fam) - header.EthernetLen
	if len(frame) < hl+header.EthernetLen {
		return 0, false
	}
	et := header.Ethernet(frame[:header.EthernetLen]).Fixed().EtherType()
	ip := frame[header.EthernetLen:]
	var dst [16]byte
	switch et {
	case header.EtherTypeIPv4:
		dst = netip.AddrFrom4([4]byte(ip[16:20])).As16()
	case header.EtherTypeIPv6:
		dst = [16]byte(ip[24:40])
	default:
		return 0, false
	}
	switch {
	case dst == ln.vtep:
		return hl, true
	case (st.snap.hasVTEP[0] && dst == st.snap.vtep[0]) || (st.snap.hasVTEP[1] && dst == st.snap.vtep[1]):
		return 0, true
	}
	return 0, false
}
