package route

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

func testSnapshot() *snapshot {
	s := newSnapshot()
	s.setLink(2, [6]byte{2, 0, 0, 0, 0, 2}, 0)
	s.setLink(3, [6]byte{2, 0, 0, 0, 0, 3}, 0)
	add := func(p string, ifindex int, gw string) {
		pfx := netip.MustParsePrefix(p)
		r := route{ifindex: ifindex, onLink: true}
		if gw != "" {
			r.gw, r.onLink = netip.MustParseAddr(gw).As16(), false
		}
		s.addRoute(pfx, r)
	}
	add("0.0.0.0/0", 2, "10.0.0.254")
	add("10.0.0.0/24", 2, "")
	add("10.1.0.0/16", 3, "10.0.1.1")
	add("10.1.2.128/25", 3, "")
	add("::/0", 2, "fd00::fe")
	add("fd00:1::/64", 3, "")
	s.lens4 = []uint8{25, 24, 16, 0}
	s.lens6 = []uint8{64, 0}
	s.addNeigh(neighKey{2, netip.MustParseAddr("10.0.0.254").As16()}, [6]byte{0xaa, 1, 1, 1, 1, 1})
	s.addNeigh(neighKey{3, netip.MustParseAddr("10.1.2.200").As16()}, [6]byte{0xaa, 2, 2, 2, 2, 2})
	s.addNeigh(neighKey{3, netip.MustParseAddr("fd00:1::9").As16()}, [6]byte{0xaa, 3, 3, 3, 3, 3})
	s.sealNeigh(nil)
	return s
}

// lookupAddr asks c for a's next hop.
func lookupAddr(c *Cache, a netip.Addr) (Hop, Verdict) {
	var h Hop
	k := a.As16() // IPv4-mapped for IPv4
	v := c.Lookup(&k, &h)
	return h, v
}

func testCache() *Cache {
	c := &Cache{resolve: make(chan neighKey, 8)}
	c.snap.Store(testSnapshot())
	return c
}

func TestLongestPrefixMatch(t *testing.T) {
	c := testCache()
	for _, tc := range []struct {
		dst     string
		verdict Verdict
		ifindex int
		gw      string
		mac     byte
	}{
		{"8.8.8.8", Found, 2, "10.0.0.254", 1},
		{"10.0.0.7", NoNeighbour, 2, "10.0.0.7", 0},
		{"10.1.9.9", NoNeighbour, 3, "10.0.1.1", 0},
		{"10.1.2.200", Found, 3, "10.1.2.200", 2},
		{"10.1.2.100", NoNeighbour, 3, "10.0.1.1", 0},
		{"::ffff:10.1.2.200", Found, 3, "10.1.2.200", 2},
		{"fd00:1::9", Found, 3, "fd00:1::9", 3},
		{"2001:db8::1", NoNeighbour, 2, "fd00::fe", 0},
	} {
		nh, v := lookupAddr(c, netip.MustParseAddr(tc.dst))
		k := netip.MustParseAddr(tc.dst).Unmap().As16()
		r, _ := c.snap.Load().lookupRoute(&k)
		gw := r.gw
		if r.onLink {
			gw = k
		}
		if v != tc.verdict || r.ifindex != tc.ifindex || netip.AddrFrom16(gw).Unmap() != netip.MustParseAddr(tc.gw).Unmap() || nh.DstMAC[1] != tc.mac {
			t.Errorf("Lookup(%s) = %+v, %v via %v; want %v via %s on %d", tc.dst, nh, v, netip.AddrFrom16(gw), tc.verdict, tc.gw, tc.ifindex)
		}
		if v == Found && (nh.Ifindex != tc.ifindex || nh.MTU != defaultMTU) {
			t.Errorf("Lookup(%s) = %+v; want interface %d, default MTU", tc.dst, nh, tc.ifindex)
		}
		if v == Found && nh.SrcMAC[5] != byte(tc.ifindex) {
			t.Errorf("Lookup(%s) src MAC %x, want interface %d's", tc.dst, nh.SrcMAC, tc.ifindex)
		}
	}
	if got := c.Stats().NoNeighbour; got != 4 {
		t.Fatalf("%d no-neighbour misses counted, want 4", got)
	}
	if len(c.resolve) != 4 {
		t.Fatalf("%d resolutions requested, want 4", len(c.resolve))
	}
	s := testSnapshot()
	delete(s.routes4, key4(0, 0))
	s.lens4 = []uint8{25, 24, 16}
	c.snap.Store(s)
	if _, v := lookupAddr(c, netip.MustParseAddr("8.8.8.8")); v != NoRoute || c.Stats().NoRoute != 1 {
		t.Fatalf("without a default route: %v", v)
	}
}

func TestLookupMissNeverBlocks(t *testing.T) {
	c := testCache() // nobody drains c.resolve
	for i := 0; i < 100; i++ {
		lookupAddr(c, netip.MustParseAddr("10.0.0.7"))
	}
	if c.Stats().NoNeighbour != 100 {
		t.Fatal("misses not counted")
	}
}

func TestLookupNoAllocs(t *testing.T) {
	c := testCache()
	dsts := []netip.Addr{netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("fd00:1::9"), netip.MustParseAddr("10.0.0.7")}
	if n := testing.AllocsPerRun(1000, func() {
		for _, d := range dsts {
			lookupAddr(c, d)
		}
		<-c.resolve
	}); n != 0 {
		t.Fatalf("%v allocations per lookup round, want 0", n)
	}
}

// BenchmarkLookup is the pipeline's per-packet hop lookup, MTU included:
// the default route (IPv4) and an on-link neighbour (IPv6).
func BenchmarkLookup(b *testing.B) {
	c := testCache()
	s := c.snap.Load()
	s.links[2].mtu, s.links[3].mtu = 1500, 9000
	for _, a := range []string{"8.8.8.8", "fd00:1::9"} {
		d := netip.MustParseAddr(a).As16()
		b.Run(a, func(b *testing.B) {
			var h Hop
			b.ReportAllocs()
			for b.Loop() {
				if v := c.Lookup(&d, &h); v != Found {
					b.Fatal(v)
				}
			}
		})
	}
}

// The per-length maps agree with a linear longest-prefix scan on random
// tables (fixed seed).
func TestLongestPrefixMatchAgainstScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newSnapshot()
	var pfxs []netip.Prefix
	var ids []int
	seen4, seen6 := map[uint8]bool{}, map[uint8]bool{}
	for i := 0; i < 300; i++ {
		var p netip.Prefix
		if i%2 == 0 {
			p = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(256)), byte(rng.IntN(256))}), 8+rng.IntN(25)).Masked()
			seen4[uint8(p.Bits())] = true
		} else {
			p = netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, byte(rng.IntN(4)), byte(rng.IntN(256)), 15: byte(rng.IntN(256))}), 16+rng.IntN(113)).Masked()
			seen6[uint8(p.Bits())] = true
		}
		if s.addRoute(p, route{ifindex: i + 1}) {
			pfxs, ids = append(pfxs, p), append(ids, i+1)
		}
	}
	s.lens4, s.lens6 = sortedLens(seen4), sortedLens(seen6)
	for i := 0; i < 5000; i++ {
		var a netip.Addr
		if i%2 == 0 {
			a = netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(256)), byte(rng.IntN(256))})
		} else {
			a = netip.AddrFrom16([16]byte{0xfd, 0, byte(rng.IntN(4)), byte(rng.IntN(256)), 15: byte(rng.IntN(256))})
		}
		want, best := 0, -1
		for j, p := range pfxs {
			if p.Contains(a) && p.Bits() > best {
				want, best = ids[j], p.Bits()
			}
		}
		k := a.As16()
		r, ok := s.lookupRoute(&k)
		got := 0
		if ok {
			got = r.ifindex
		}
		if got != want {
			t.Fatalf("lookup %s: route %d, scan says %d", a, got, want)
		}
	}
}

// A lookup that finds a neighbour marks it in use (once), and a rebuilt
// snapshot keeps the marks of the neighbours it still has.
func TestLookupMarksNeighbourInUse(t *testing.T) {
	c := testCache()
	s := c.snap.Load()
	k := neighKey{2, netip.MustParseAddr("10.0.0.254").As16()}
	if s.used[s.neigh[k].i].Load() != 0 {
		t.Fatal("marked before any lookup")
	}
	if _, v := lookupAddr(c, netip.MustParseAddr("8.8.8.8")); v != Found {
		t.Fatalf("lookup via the default route: %v", v)
	}
	marked := 0
	for i := range s.used {
		if s.used[i].Load() != 0 {
			marked++
			if s.nkeys[i] != k {
				t.Errorf("neighbour %v marked; only the default gateway was used", s.nkeys[i])
			}
		}
	}
	if marked != 1 {
		t.Fatalf("%d neighbours marked, want 1", marked)
	}
	n := newSnapshot()
	n.addNeigh(neighKey{3, netip.MustParseAddr("10.1.2.200").As16()}, [6]byte{1})
	n.addNeigh(k, [6]byte{2})
	n.sealNeigh(s)
	if n.used[n.neigh[k].i].Load() == 0 || n.used[0].Load() != 0 {
		t.Errorf("rebuild lost or invented marks: %v %v", n.used[0].Load(), n.used[1].Load())
	}
}

// A static table answers like the kernel-fed one: longest prefix first,
// the route's hop with its MTU, nothing for an address no route covers.
func TestStatic(t *testing.T) {
	out := Hop{Ifindex: 7, SrcMAC: [6]byte{2, 0xaa}, DstMAC: [6]byte{2, 0xbb}, MTU: 1500}
	under := Hop{Ifindex: 8, SrcMAC: [6]byte{2, 0xaa, 1}, DstMAC: [6]byte{2, 0xcc}, MTU: 9000}
	c := NewStatic(
		Static{netip.MustParsePrefix("0.0.0.0/0"), out},
		Static{netip.MustParsePrefix("fd00::/64"), under},
		Static{netip.MustParsePrefix("10.0.0.0/24"), under},
	)
	defer c.Close()
	for _, tc := range []struct {
		dst  string
		want Hop
		v    Verdict
	}{
		{"8.8.8.8", out, Found},
		{"10.0.0.2", under, Found},
		{"fd00::2", under, Found},
		{"2001:db8::1", Hop{}, NoRoute},
	} {
		if h, v := lookupAddr(c, netip.MustParseAddr(tc.dst)); v != tc.v || h != tc.want {
			t.Errorf("%s: %+v %v; want %+v %v", tc.dst, h, v, tc.want, tc.v)
		}
	}
	if NewStatic().Close() != nil {
		t.Fatal("Close of a static table failed")
	}
}
