package config

import "net/netip"

// The local port: how a gateway serves pods on its own node. Their traffic
// never reaches the NIC, so it cannot come through the tunnel: the engine
// creates a veth pair, LocalKernelLink (the node's side, where the steer
// agent routes the node's selected pods to the local gateway) and
// LocalPortLink (the gateway's side, which it serves). Each plain frame
// that arrives on LocalPortLink is wrapped, in the gateway, in the
// encapsulation a worker would have sent, from the tunnel source
// LocalVTEP4 or LocalVTEP6, the VTEP of the gateway's local node (a Node
// with Local set); replies to that VTEP leave through LocalPortLink
// unwrapped. No other port may send frames from that VTEP. The names,
// MACs and addresses are fixed: the steer agent on the same node uses them
// without asking the gateway.
const (
	LocalKernelLink = "egret-lh"
	LocalPortLink   = "egret-lg"
)

var (
	// LocalKernelMAC is LocalKernelLink's MAC: the inner destination of
	// replies to local pods.
	LocalKernelMAC = [6]byte{0x02, 0x65, 0x67, 0x72, 0x74, 0x01}
	// LocalPortMAC is LocalPortLink's MAC: the steer agent's neighbour
	// entry for LocalNextHop4/6 on LocalKernelLink.
	LocalPortMAC = [6]byte{0x02, 0x65, 0x67, 0x72, 0x74, 0x02}
	// LocalVTEP4 and LocalVTEP6 are the tunnel sources the gateway gives
	// local pods' frames (IPv4 when the gateway has an IPv4 VTEP): link-local
	// and unique-local addresses no node uses, routed by the engine through
	// LocalPortLink to LocalKernelMAC.
	LocalVTEP4 = netip.MustParseAddr("169.254.238.1")
	LocalVTEP6 = netip.MustParseAddr("fd65:6772:6574:6c70::1")
	// LocalKernelAddr4 is LocalKernelLink's own IPv4 address (a /32): the
	// gateway hands other gateways' tunnelled replies to the node's pods to
	// the node through the pair, and the kernel's loose reverse-path filter
	// refuses packets arriving on an interface with no IPv4 address.
	LocalKernelAddr4 = netip.MustParseAddr("169.254.238.4")
	// LocalNextHop4 and LocalNextHop6 are the next hops the steer agent's
	// routes name on LocalKernelLink for the local gateway.
	LocalNextHop4 = netip.MustParseAddr("169.254.238.2")
	LocalNextHop6 = netip.MustParseAddr("fd65:6772:6574:6c70::2")
)

// LocalVTEP is the local node's VTEP for a gateway whose VTEPs are vteps:
// IPv4 when it has an IPv4 one; invalid when it has none.
func LocalVTEP(vteps []netip.Addr) netip.Addr {
	var out netip.Addr
	for _, v := range vteps {
		switch {
		case v.Unmap().Is4():
			return LocalVTEP4
		case v.IsValid():
			out = LocalVTEP6
		}
	}
	return out
}
