package route

import (
	"net/netip"
	"testing"
)

var tableSink *Cache

// BenchmarkRouterLookup is the pipeline's per-packet hop lookup: a direct
// call on the next-hop table, MTU included.
func BenchmarkRouterLookup(b *testing.B) {
	tableSink = testCache()
	s := tableSink.snap.Load()
	s.links[2].mtu, s.links[3].mtu = 1500, 9000
	for _, a := range []string{"8.8.8.8", "fd00:1::9"} {
		d := netip.MustParseAddr(a).As16()
		b.Run(a, func(b *testing.B) {
			var h Hop
			for b.Loop() {
				if tableSink.Lookup(&d, &h) != Found {
					b.Fatal("no hop")
				}
			}
		})
	}
}
