package route_test

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/internal/nstest"
)

var (
	pe0   = nstest.RoutedPE0
	pe06  = nstest.RoutedPE06
	r0    = nstest.RoutedR0
	later = netip.MustParsePrefix("198.51.100.0/24")
)

// newTopo builds peer ─pe0──gw0─ gw ─gw1──r0─ router, with 192.0.2.0/24 via
// the router.
func newTopo(t *testing.T) *nstest.Routed { return nstest.NewRouted(t) }

func mac6(m net.HardwareAddr) (a [6]byte) { copy(a[:], m); return }

// lookup asks c for a's next hop.
func lookup(c *route.Cache, a netip.Addr) (route.Hop, route.Verdict) {
	var h route.Hop
	k := a.As16()
	v := c.Lookup(&k, &h)
	return h, v
}

func TestCacheFollowsKernel(t *testing.T) {
	tp := newTopo(t)
	c, err := route.NewCache(route.Options{NetNS: tp.GW.Handle})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// On-link neighbour not yet known: a counted miss, then the kernel
	// resolves it on our request.
	peer := pe0.Addr()
	nh, v := lookup(c, peer)
	if v != route.NoNeighbour {
		t.Fatalf("first lookup of %s = %+v %v; want a no-neighbour miss on gw0", peer, nh, v)
	}
	if c.Stats().NoNeighbour != 1 {
		t.Fatalf("miss not counted: %+v", c.Stats())
	}
	nstest.Eventually(t, "the kernel to resolve "+peer.String(), 3*time.Second, func() bool { nh, v = lookup(c, peer); return v == route.Found })
	if nh.DstMAC != mac6(tp.PE0.MAC) || nh.SrcMAC != mac6(tp.GW0.MAC) || nh.Ifindex != tp.GW0.Index {
		t.Fatalf("next hop %+v; want %s → %s on gw0", nh, tp.GW0.MAC, tp.PE0.MAC)
	}

	// Via a router: the next hop is the router's MAC on gw1.
	dst := netip.MustParseAddr("192.0.2.77")
	nstest.Eventually(t, "the router's MAC", 3*time.Second, func() bool { nh, v = lookup(c, dst); return v == route.Found })
	if nh.DstMAC != mac6(tp.R0.MAC) || nh.Ifindex != tp.GW1.Index {
		t.Fatalf("next hop for %s = %+v; want %s (%s) on gw1", dst, nh, r0.Addr(), tp.R0.MAC)
	}

	// IPv6 neighbour discovery.
	nstest.Eventually(t, "IPv6 neighbour", 3*time.Second, func() bool { nh, v = lookup(c, pe06.Addr()); return v == route.Found })
	if nh.DstMAC != mac6(tp.PE0.MAC) {
		t.Fatalf("v6 next hop %+v", nh)
	}

	// Route changes show up.
	in := netip.MustParseAddr("198.51.100.10")
	if _, v := lookup(c, in); v != route.NoRoute {
		t.Fatalf("lookup of %s before its route: %v", in, v)
	}
	r := tp.GW.AddRoute(t, "gw0", later, pe0.Addr())
	nstest.Eventually(t, "new route", 3*time.Second, func() bool { nh, v = lookup(c, in); return v == route.Found && nh.Ifindex == tp.GW0.Index })
	if err := tp.GW.NL.RouteDel(r); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, "route removal", 3*time.Second, func() bool { _, v = lookup(c, in); return v == route.NoRoute })

	// Neighbour changes show up.
	fake := net.HardwareAddr{0x02, 0xee, 0, 0, 0, 1}
	tp.GW.AddNeigh(t, "gw0", peer, fake)
	nstest.Eventually(t, "neighbour change", 3*time.Second, func() bool { nh, _ = lookup(c, peer); return nh.DstMAC == mac6(fake) })
}
