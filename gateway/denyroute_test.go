package gateway

import (
	"net/netip"
	"testing"

	"github.com/egret-gw/egret/gateway/route"
)

// TestDeniedWithoutRoute: a denied destination the gateway has no usable
// route to (its own address, a neighbour on its subnet that does not
// resolve, here no default route) counts as denied_destination, not
// no_route, so the deny-list's counter shows every attempt; an allowed
// destination without a route stays no_route.
func TestDeniedWithoutRoute(t *testing.T) {
	cfg := testConfig()
	cfg.Routes = route.NewStatic(
		route.Static{Prefix: netip.MustParsePrefix("10.0.0.0/24"), Hop: underlayHop},
		route.Static{Prefix: netip.MustParsePrefix("fd00::/64"), Hop: underlayHop},
	)
	for _, c := range []struct {
		dst  netip.Addr
		want DropReason
	}{
		{netip.MustParseAddr("169.254.169.254"), DropDeniedDestination},
		{netip.MustParseAddr("fe80::1"), DropDeniedDestination},
		{server4, DropNoRoute},
	} {
		f := newFixture(t, 64, cfg)
		src := pod1v4
		if c.dst.Is6() {
			src = pod1v6
		}
		r := processOne(f.w, testNow, tunnelFrame(t, podTun(), udpFrom(src, c.dst).build(t)), make([]byte, 2048))
		if r.Verdict != VerdictDrop || r.Reason != c.want {
			t.Errorf("%v: %v %v, want drop %v", c.dst, r.Verdict, r.Reason, c.want)
		}
	}
}
