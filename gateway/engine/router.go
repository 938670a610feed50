package engine

import (
	"net/netip"
	"sync/atomic"

	"github.com/vishvananda/netlink"

	"github.com/egret-gw/egret/gateway"
	"github.com/egret-gw/egret/gateway/route"
)

// maxIfindex bounds the MTU table; links with a larger index get defaultMTU.
const (
	maxIfindex = 1 << 16
	defaultMTU = 1500
)

// kernelRouter adapts the netlink-fed route.Cache to gateway.Router and adds
// the link MTU, which the cache does not keep. A missing neighbour is a
// failed lookup (the pipeline counts it as no_route) and the cache has
// already asked the kernel to resolve it.
type kernelRouter struct {
	cache *route.Cache
	mtu   atomic.Pointer[[]int32] // by ifindex; 0: unknown
}

var _ gateway.Router = (*kernelRouter)(nil)

// Lookup implements gateway.Router without allocating.
func (r *kernelRouter) Lookup(dst *[16]byte, hop *gateway.Hop) bool {
	nh, v := r.cache.Lookup(netip.AddrFrom16(*dst))
	if v != route.Found {
		return false
	}
	hop.Ifindex, hop.SrcMAC, hop.DstMAC = nh.Ifindex, nh.SrcMAC, nh.DstMAC
	hop.MTU = defaultMTU
	if t := *r.mtu.Load(); nh.Ifindex >= 0 && nh.Ifindex < len(t) && t[nh.Ifindex] > 0 {
		hop.MTU = int(t[nh.Ifindex])
	}
	return true
}

// refreshMTU rereads the MTU of every link through nl.
func (r *kernelRouter) refreshMTU(nl *netlink.Handle) error {
	links, err := nl.LinkList()
	if err != nil {
		return err
	}
	top := 0
	for _, l := range links {
		if i := l.Attrs().Index; i > top && i < maxIfindex {
			top = i
		}
	}
	t := make([]int32, top+1)
	for _, l := range links {
		if i := l.Attrs().Index; i >= 0 && i <= top {
			t[i] = int32(l.Attrs().MTU)
		}
	}
	r.mtu.Store(&t)
	return nil
}
