package route_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/egret-gw/egret/gateway/route"
	"github.com/egret-gw/egret/internal/nstest"
)

// sysctl writes a /proc/sys value inside ns.
func sysctl(t *testing.T, ns *nstest.NS, key, val string) {
	t.Helper()
	if err := ns.Do(func() error { return os.WriteFile("/proc/sys/"+key, []byte(val), 0o644) }); err != nil {
		t.Fatalf("sysctl %s=%s: %v", key, val, err)
	}
}

func neighState(t *testing.T, ns *nstest.NS, ifindex int, ip netip.Addr) int {
	t.Helper()
	ns4, err := ns.NL.NeighList(ifindex, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns4 {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip {
			return n.State
		}
	}
	return 0
}

// TestInUseNeighboursStayFresh: no kernel traffic uses the gateway's next
// hops, so their neighbour entries would go STALE (and stay unconfirmed)
// after base_reachable_time. The cache hands the ones lookups found to the
// kernel every RefreshEvery, so under traffic the peer stays
// REACHABLE/DELAY/PROBE and never misses after the first resolution, while a
// next hop nobody uses any more is left to go STALE.
func TestInUseNeighboursStayFresh(t *testing.T) {
	tp := newTopo(t)
	for _, dev := range []string{"gw0", "gw1"} {
		// REACHABLE for 1.25–3.75 s after a confirmation, longer than the
		// 1 s "recently used" window: an entry nothing uses goes STALE.
		sysctl(t, tp.GW, "net/ipv4/neigh/"+dev+"/base_reachable_time_ms", "2500")
		sysctl(t, tp.GW, "net/ipv4/neigh/"+dev+"/delay_first_probe_time", "1")
	}
	c, err := route.NewCache(route.Options{NetNS: tp.GW.Handle, RefreshEvery: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	peer, router := pe0.Addr(), r0.Addr()
	far := netip.MustParseAddr("192.0.2.77")
	nstest.Eventually(t, "the peer to resolve", 3*time.Second, func() bool { _, v := lookup(c, peer); return v == route.Found })
	nstest.Eventually(t, "the router to resolve", 3*time.Second, func() bool { _, v := lookup(c, far); return v == route.Found })
	misses := c.Stats().NoNeighbour

	// Traffic to the peer only, for several reachable times.
	states := map[int]int{}
	var routerStale bool
	rstates := map[int]int{}
	// sleep: samples the kernel's neighbour states while its reachable timers run out (2.5 s); they raise no event
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, v := lookup(c, peer); v != route.Found {
			t.Fatalf("lookup of the in-use peer: %v", v)
		}
		states[neighState(t, tp.GW, tp.GW0.Index, peer)]++
		rs := neighState(t, tp.GW, tp.GW1.Index, router)
		rstates[rs]++
		routerStale = routerStale || rs == netlink.NUD_STALE
	}
	if got := c.Stats().NoNeighbour; got != misses {
		t.Errorf("%d neighbour misses under steady traffic, want none after the first", got-misses)
	}
	if n := states[netlink.NUD_STALE]; n > 0 {
		t.Errorf("the in-use peer was STALE in %d of %d samples (states %v): it is not being revalidated", n, sumOf(states), stateNames(states))
	}
	if states[netlink.NUD_REACHABLE] == 0 {
		t.Errorf("the in-use peer was never REACHABLE: %v", stateNames(states))
	}
	if !routerStale {
		t.Error("the router, not looked up any more, never went STALE: refreshes are not limited to next hops in use")
	}
	if c.Stats().Refreshes == 0 {
		t.Error("no refresh counted")
	}
	t.Logf("peer states over 6 s: %v; router %v; refreshes %d", stateNames(states), stateNames(rstates), c.Stats().Refreshes)
}

func sumOf(m map[int]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

func stateNames(m map[int]int) map[string]int {
	names := map[int]string{netlink.NUD_REACHABLE: "REACHABLE", netlink.NUD_STALE: "STALE", netlink.NUD_DELAY: "DELAY",
		netlink.NUD_PROBE: "PROBE", netlink.NUD_FAILED: "FAILED", netlink.NUD_INCOMPLETE: "INCOMPLETE", 0: "absent"}
	out := map[string]int{}
	for k, v := range m {
		n, ok := names[k]
		if !ok {
			n = fmt.Sprintf("0x%x", k)
		}
		out[n] += v
	}
	return out
}

// TestRoutersResolvedAhead: a gateway that just started (or whose routes
// just changed) has no neighbour entry for its router yet. The cache asks
// the kernel to resolve every router its routes name, so the first packet
// to an outside address finds its next hop instead of being dropped as a
// miss (seen on the real cluster after a gateway restart).
func TestRoutersResolvedAhead(t *testing.T) {
	tp := newTopo(t)
	router := r0.Addr()
	if s := neighState(t, tp.GW, tp.GW1.Index, router); s&(netlink.NUD_REACHABLE|netlink.NUD_STALE) != 0 {
		t.Fatalf("the router's neighbour is known before the cache starts (state %#x): the test proves nothing", s)
	}
	c, err := route.NewCache(route.Options{NetNS: tp.GW.Handle})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// No lookup until the kernel has resolved the router on its own: no
	// packet asked for it.
	nstest.Eventually(t, "the router to resolve without traffic", 3*time.Second, func() bool {
		return neighState(t, tp.GW, tp.GW1.Index, router) == netlink.NUD_REACHABLE
	})
	far := netip.MustParseAddr("192.0.2.77")
	nstest.Eventually(t, "the cache to see the router", 3*time.Second, func() bool {
		hop, v := lookup(c, far)
		return v == route.Found && hop.DstMAC == mac6(tp.R0.MAC)
	})
}

// TestPermanentNeighbourKept: a permanent neighbour in use (the gateway's
// local port has one: gateway/engine local.go) is never handed to the
// kernel for revalidation, which would replace it by an incomplete entry
// that no one answers (it went FAILED, and the next hop was lost).
func TestPermanentNeighbourKept(t *testing.T) {
	tp := newTopo(t)
	far := netip.MustParseAddr("192.0.2.99")
	tp.GW.AddNeigh(t, "gw0", far, net.HardwareAddr{2, 0, 0, 0, 0, 0x99})
	l, err := tp.GW.NL.LinkByName("gw0")
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.GW.NL.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: far.AsSlice(), HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 0x99}}); err != nil {
		t.Fatal(err)
	}
	tp.GW.AddRoute(t, "gw0", netip.PrefixFrom(far, 32), netip.Addr{})
	c, err := route.NewCache(route.Options{NetNS: tp.GW.Handle, RefreshEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := pe0.Addr() // a dynamic neighbour in use beside it: its refreshes count the periods
	nstest.Eventually(t, "both neighbours found", 3*time.Second, func() bool {
		_, v := lookup(c, far)
		_, w := lookup(c, peer)
		return v == route.Found && w == route.Found
	})
	// Both in use across ten refresh periods.
	nstest.Eventually(t, "ten refresh periods", 5*time.Second, func() bool {
		lookup(c, far)
		lookup(c, peer)
		return c.Stats().Refreshes >= 10
	})
	if st := neighState(t, tp.GW, l.Attrs().Index, far); st != netlink.NUD_PERMANENT {
		t.Fatalf("the permanent neighbour is in state %#x after refreshes, want PERMANENT (%#x)", st, netlink.NUD_PERMANENT)
	}
}
