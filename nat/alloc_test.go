package nat

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

const (
	tcp    = 6
	udp    = 17
	icmp   = 1
	icmpv6 = 58
)

var (
	egress  = v4(192, 0, 2, 10)
	egress2 = v4(192, 0, 2, 11)
	egress6 = v6(0xee, 1)
	server1 = v4(198, 51, 100, 1)
	server2 = v4(198, 51, 100, 2)
	server6 = v6(0x55, 1)
	pod1    = v4(10, 128, 0, 5)
	pod2    = v4(10, 128, 1, 7)
	pod6    = v6(0x10, 5)
)

func TestNewAllocatorRejectsBadConfig(t *testing.T) {
	mod := func(f func(*Config)) Config { c := DefaultConfig(); f(&c); return c }
	cases := []struct {
		name string
		cfg  Config
		tab  InUse
	}{
		{"PortMin below 1024", mod(func(c *Config) { c.PortMin = 1023 }), newFlows()},
		{"PortMin zero", mod(func(c *Config) { c.PortMin = 0 }), newFlows()},
		{"PortMin above PortMax", mod(func(c *Config) { c.PortMin, c.PortMax = 40000, 30000 }), newFlows()},
		{"negative RandomAttempts", mod(func(c *Config) { c.RandomAttempts = -1 }), newFlows()},
		{"huge RandomAttempts", mod(func(c *Config) { c.RandomAttempts = 1 << 20 }), newFlows()},
		{"nil InUse", DefaultConfig(), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAllocator(tc.cfg, tc.tab)
			if !errors.Is(err, ErrConfig) || a != nil {
				t.Fatalf("NewAllocator = %v, %v; want nil, ErrConfig", a, err)
			}
		})
	}
	// The zero Config with a valid range is accepted and gets default attempts.
	a, err := NewAllocator(Config{PortMin: 1024, PortMax: 2047}, newFlows())
	if err != nil || a.Config().RandomAttempts != defaultRandomAttempts {
		t.Fatalf("minimal config: %v, attempts %d", err, a.Config().RandomAttempts)
	}
}

func TestBadInputGivesErrorsNotPanics(t *testing.T) {
	tab := newFlows()
	a := newAlloc(t, DefaultConfig(), tab)
	cases := []struct {
		name  string
		proto uint8
		nat   Addr
		want  error
	}{
		{"GRE has no ports", 47, egress, ErrProto},
		{"proto 0", 0, egress, ErrProto},
		{"egress ::", tcp, Addr{}, ErrAddr},
		{"egress 0.0.0.0", udp, v4(0, 0, 0, 0), ErrAddr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := a.Allocate(tc.proto, pod1, 40000, server1, 443, tc.nat, 1); !errors.Is(err, tc.want) {
				t.Fatalf("Allocate: %v, want %v", err, tc.want)
			}
		})
	}
	// Releases that match nothing are counted, never panic, and never
	// disturb a live allocation.
	f := flow{proto: tcp, src: pod1, sport: 40000, dst: server1, dport: 443, nat: egress}
	p := mustOpen(t, a, tab, &f, 1)
	a.Release(47, pod1, 40000, server1, 443, egress, p)   // bad proto
	a.Release(tcp, pod1, 40000, server1, 443, egress2, p) // unknown IP
	a.Release(tcp, pod1, 40000, server1, 443, egress, 0)  // port 0
	a.Release(udp, pod1, 40000, server1, 443, egress, p)  // no UDP table yet
	a.Release(tcp, pod1, 40000, server1, 443, egress, p+1)
	if got := a.StrayReleases(); got != 5 {
		t.Fatalf("StrayReleases = %d, want 5", got)
	}
	if a.PortsInUse(egress, tcp) != 1 {
		t.Fatalf("stray releases changed PortsInUse to %d", a.PortsInUse(egress, tcp))
	}
	closeFlow(a, tab, &f)
	a.Release(tcp, pod1, 40000, server1, 443, egress, p) // double release
	if a.StrayReleases() != 6 || a.PortsInUse(egress, tcp) != 0 {
		t.Fatalf("double release: stray %d, in use %d", a.StrayReleases(), a.PortsInUse(egress, tcp))
	}
	if a.PortsInUse(egress, 47) != 0 || a.PortsInUse(egress2, tcp) != 0 || a.Exhausted(egress2) != 0 {
		t.Fatal("metrics of unknown protocol or IP are not zero")
	}
}

// RFC 4787 REQ-3 (and RFC 5382 §5, RFC 5508 §3.2 for identifiers): the
// pod's port is kept when the reply tuple it gives is free; a port is never
// shared by two flows towards the same destination endpoint (no overloading
// of a reply 5-tuple); towards a different destination it is reused.
func TestRFC4787_REQ3_PortPreservation(t *testing.T) {
	cases := []struct {
		name     string
		proto    uint8
		nat      Addr
		src, dst Addr
		sport    uint16
		dport    uint16
		// busy is a flow opened first by another pod with the same sport.
		busyDst      Addr
		busyDport    uint16
		wantPreserve bool
	}{
		{"TCP free port kept", tcp, egress, pod1, server1, 40000, 443, Addr{}, 0, true},
		{"UDP free port kept", udp, egress, pod1, server1, 40001, 53, Addr{}, 0, true},
		{"ICMP identifier kept", icmp, egress, pod1, server1, 7, 0, Addr{}, 0, true},
		{"ICMPv6 identifier kept", icmpv6, egress6, pod6, server6, 7, 0, Addr{}, 0, true},
		{"IPv6 TCP free port kept", tcp, egress6, pod6, server6, 40000, 443, Addr{}, 0, true},
		{"TCP taken towards same server: moved", tcp, egress, pod1, server1, 40000, 443, server1, 443, false},
		{"UDP taken towards same server: moved", udp, egress, pod1, server1, 40000, 53, server1, 53, false},
		{"ICMP id taken towards same server: moved", icmp, egress, pod1, server1, 9, 0, server1, 0, false},
		{"TCP taken towards other server: reused", tcp, egress, pod1, server1, 40000, 443, server2, 443, true},
		{"TCP taken towards other server port: reused", tcp, egress, pod1, server1, 40000, 443, server1, 8443, true},
		{"UDP taken towards other server: reused", udp, egress, pod1, server1, 40000, 53, server2, 53, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tab := newFlows()
			a := newAlloc(t, DefaultConfig(), tab)
			if tc.busyDst != (Addr{}) {
				busy := flow{proto: tc.proto, src: pod2, sport: tc.sport, dst: tc.busyDst, dport: tc.busyDport, nat: tc.nat}
				if p := mustOpen(t, a, tab, &busy, 11); p != tc.sport {
					t.Fatalf("first flow not preserved: %d", p)
				}
			}
			f := flow{proto: tc.proto, src: tc.src, sport: tc.sport, dst: tc.dst, dport: tc.dport, nat: tc.nat}
			p := mustOpen(t, a, tab, &f, 12)
			if (p == tc.sport) != tc.wantPreserve {
				t.Fatalf("port %d for sport %d, want preserved=%v", p, tc.sport, tc.wantPreserve)
			}
			lo, hi := uint16(1024), uint16(65535)
			if tc.proto == icmp || tc.proto == icmpv6 {
				lo = 1
			}
			if p < lo || p > hi {
				t.Fatalf("port %d outside %d–%d", p, lo, hi)
			}
		})
	}
}

// With PreservePort off every port is random: over many flows few (by
// chance) equal the source port, and all come from the range.
func TestRFC4787_REQ3_PreservationOff(t *testing.T) {
	tab := newFlows()
	cfg := DefaultConfig()
	cfg.PreservePort = false
	cfg.PortMin, cfg.PortMax = 30000, 39999
	a := newAlloc(t, cfg, tab)
	r := rng(3)
	kept := 0
	for i := 0; i < 1000; i++ {
		f := flow{proto: udp, src: pod1, sport: uint16(30000 + i), dst: server1, dport: 53, nat: egress}
		p := mustOpen(t, a, tab, &f, r.next())
		if p == f.sport {
			kept++
		}
		if p < 30000 || p > 39999 {
			t.Fatalf("port %d outside 30000–39999", p)
		}
	}
	if kept > 10 {
		t.Fatalf("%d of 1000 ports equal the source port with preservation off", kept)
	}
}

// RFC 4787 REQ-3a: privileged source ports map into 1–1023, others into
// the configured range (never into 1–1023).
func TestRFC4787_REQ3a_PortRangePreservation(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PortMin, cfg.PortMax = 20000, 20999
	cases := []struct {
		name   string
		sport  uint16
		lo, hi uint16
	}{
		{"privileged 22", 22, 1, 1023},
		{"privileged 1023", 1023, 1, 1023},
		{"privileged 1", 1, 1, 1023},
		{"below range 5000", 5000, 20000, 20999},
		{"in range 20500", 20500, 20000, 20999},
		{"above range 65535", 65535, 20000, 20999},
		{"source port 0", 0, 20000, 20999},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tab := newFlows()
			a := newAlloc(t, cfg, tab)
			r := rng(tc.sport)
			// The first flow keeps its port when that lies in its range; the
			// next ones, from other pods to the same server, must move and stay
			// in the range.
			for i := 0; i < 50; i++ {
				f := flow{proto: tcp, src: v4(10, 0, byte(i), 1), sport: tc.sport, dst: server1, dport: 443, nat: egress}
				p := mustOpen(t, a, tab, &f, r.next())
				if p < tc.lo || p > tc.hi {
					t.Fatalf("flow %d: port %d outside %d–%d", i, p, tc.lo, tc.hi)
				}
				if i == 0 && tc.sport >= tc.lo && tc.sport <= tc.hi && p != tc.sport {
					t.Fatalf("first flow not preserved: %d", p)
				}
			}
		})
	}
}

// RFC 4787 REQ-4: a port that cannot be preserved keeps its parity.
func TestRFC4787_REQ4_PortParityPreservation(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("PreserveParity=%v", on), func(t *testing.T) {
			tab := newFlows()
			cfg := DefaultConfig()
			cfg.PreserveParity = on
			a := newAlloc(t, cfg, tab)
			r := rng(4)
			mismatch := 0
			for _, sport := range []uint16{5004, 5005} {
				// Pod 0 keeps sport; pods 1..399 collide with it and get random ports.
				for i := 0; i < 400; i++ {
					f := flow{proto: udp, src: v4(10, 1, byte(i>>8), byte(i)), sport: sport, dst: server1, dport: 5060, nat: egress}
					p := mustOpen(t, a, tab, &f, r.next())
					if p&1 != sport&1 {
						mismatch++
					}
				}
			}
			if on && mismatch != 0 {
				t.Fatalf("%d of 800 ports changed parity", mismatch)
			}
			if !on && (mismatch < 300 || mismatch > 500) {
				t.Fatalf("%d of 800 ports changed parity with parity preservation off; want about half", mismatch)
			}
		})
	}
}

// eimMapping checks endpoint-independent mapping for proto (UDP: RFC 4787
// REQ-1, TCP: RFC 5382 REQ-1): one external port per pod endpoint for every
// destination, never shared with another endpoint, held while any flow of
// the endpoint lives.
func eimMapping(t *testing.T, proto uint8, cfg Config) {
	cases := []struct {
		name string
		dst  Addr
		port uint16
	}{
		{"first destination", server1, 443},
		{"same host other port", server1, 8443},
		{"other host", server2, 443},
		{"other host other port", server2, 53},
	}
	tab := newFlows()
	a := newAlloc(t, cfg, tab)
	// Another pod holds the same source port towards an unrelated server, so
	// the endpoint under test cannot have its port preserved: its mapping is
	// a random one, and it must still be the same for every destination.
	other := flow{proto: proto, src: pod2, sport: 40000, dst: v4(203, 0, 113, 9), dport: 80, nat: egress}
	mustOpen(t, a, tab, &other, 1)
	var mapped uint16
	var open1 []flow
	for i, tc := range cases {
		f := flow{proto: proto, src: pod1, sport: 40000, dst: tc.dst, dport: tc.port, nat: egress}
		p := mustOpen(t, a, tab, &f, uint64(100+i))
		if i == 0 {
			mapped = p
			if p == other.natPort {
				t.Fatalf("%s: endpoint got port %d, which another endpoint's mapping holds", tc.name, p)
			}
		} else if p != mapped {
			t.Fatalf("%s: port %d, want the endpoint's mapping %d", tc.name, p, mapped)
		}
		open1 = append(open1, f)
	}
	if got := a.PortsInUse(egress, proto); got != 2 {
		t.Fatalf("PortsInUse = %d, want 2 (two endpoints)", got)
	}
	// A third endpoint must not get the mapped port even towards a server the
	// first endpoint never talked to (exclusive mapping: no port overloading).
	for i := 0; i < 200; i++ {
		f := flow{proto: proto, src: v4(10, 2, 0, byte(i)), sport: mapped, dst: v4(203, 0, 113, 200), dport: 9, nat: egress}
		if p := mustOpen(t, a, tab, &f, uint64(i)); p == mapped || p == other.natPort {
			t.Fatalf("endpoint %d got port %d held by another mapping", i, p)
		}
		closeFlow(a, tab, &f)
	}
	// The mapping lives while any flow of the endpoint lives.
	for i := range open1[:len(open1)-1] {
		closeFlow(a, tab, &open1[i])
	}
	f := flow{proto: proto, src: pod1, sport: 40000, dst: v4(203, 0, 113, 50), dport: 443, nat: egress}
	if p := mustOpen(t, a, tab, &f, 999); p != mapped {
		t.Fatalf("after closing some flows: port %d, want mapping %d", p, mapped)
	}
	closeFlow(a, tab, &f)
	closeFlow(a, tab, &open1[len(open1)-1])
	// Released with the last flow: the other endpoint is the only user left,
	// and the freed port can go to a new endpoint whose own port it is.
	if got := a.PortsInUse(egress, proto); got != 1 {
		t.Fatalf("PortsInUse after the endpoint's last flow = %d, want 1", got)
	}
	g := flow{proto: proto, src: v4(10, 3, 0, 1), sport: mapped, dst: server1, dport: 443, nat: egress}
	if p := mustOpen(t, a, tab, &g, 5); p != mapped {
		t.Fatalf("freed mapping port %d not reusable: got %d", mapped, p)
	}
	if a.StrayReleases() != 0 {
		t.Fatalf("StrayReleases = %d", a.StrayReleases())
	}
}

func TestRFC4787_REQ1_EndpointIndependentMapping(t *testing.T) {
	cfg := DefaultConfig()
	cfg.UDPEndpointIndependent = true
	eimMapping(t, udp, cfg)
}

func TestRFC5382_REQ1_EndpointIndependentMapping(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TCPEndpointIndependent = true
	eimMapping(t, tcp, cfg)
}

// The default for both TCP and UDP is address-and-port-dependent mapping:
// an endpoint whose port is taken towards one destination is mapped
// differently there but keeps its port elsewhere; EIM for one protocol
// leaves the other alone.
func TestRFC4787_REQ1_DefaultAddressAndPortDependentMapping(t *testing.T) {
	for _, proto := range []uint8{udp, tcp} {
		t.Run(fmt.Sprintf("proto=%d", proto), func(t *testing.T) {
			tab := newFlows()
			cfg := DefaultConfig()
			if proto == tcp {
				cfg.UDPEndpointIndependent = true // must not affect TCP
			}
			a := newAlloc(t, cfg, tab)
			busy := flow{proto: proto, src: pod2, sport: 40000, dst: server1, dport: 53, nat: egress}
			mustOpen(t, a, tab, &busy, 1)
			f1 := flow{proto: proto, src: pod1, sport: 40000, dst: server1, dport: 53, nat: egress}
			f2 := flow{proto: proto, src: pod1, sport: 40000, dst: server2, dport: 53, nat: egress}
			p1, p2 := mustOpen(t, a, tab, &f1, 2), mustOpen(t, a, tab, &f2, 3)
			if p1 == 40000 || p2 != 40000 {
				t.Fatalf("ports %d, %d: want moved towards server1, kept towards server2", p1, p2)
			}
		})
	}
}

// RFC 5508 REQ-1 (ICMP queries from pods are permitted, so each needs a
// translated identifier): identifiers come from the same allocator with
// range 1–65535; 65535 queries towards one host fit (the bounded search
// finds nearly all of them, fillRange the last few), the next is
// exhausted, and identifier 0 is never handed out.
func TestRFC5508_REQ1_ICMPQueryIdentifiers(t *testing.T) {
	tab := newFlows()
	a := newAlloc(t, DefaultConfig(), tab)
	r := rng(5)
	seen := make([]bool, 65536)
	all := fillRange(t, a, tab, 1, 65535, func(i int) flow {
		return flow{proto: icmp, src: v4(10, 4, byte(i>>8), byte(i)), sport: uint16(r.next()), dst: server1, nat: egress}
	}, &r)
	for i, f := range all {
		if p := f.natPort; p == 0 || seen[p] {
			t.Fatalf("query %d: identifier %d (zero or repeated towards one host)", i, p)
		}
		seen[f.natPort] = true
	}
	f := flow{proto: icmp, src: pod1, sport: 1, dst: server1, nat: egress}
	if open(t, a, tab, &f, 1); !isExhausted(f.allocation) {
		t.Fatalf("65536th query: %v, want ErrExhausted", f.allocation)
	}
	g := flow{proto: icmp, src: pod1, sport: 1, dst: server2, nat: egress}
	if p := mustOpen(t, a, tab, &g, 1); p != 1 {
		t.Fatalf("query to another host: identifier %d, want preserved 1", p)
	}
	if a.PortsInUse(egress, icmp) != 65535 || a.Exhausted(egress) != 2 { // fillRange's and this
		t.Fatalf("PortsInUse %d, Exhausted %d", a.PortsInUse(egress, icmp), a.Exhausted(egress))
	}
}

// 5-tuple uniqueness lets one egress IP carry far more than 64k concurrent
// flows: 200k TCP flows from many pods to 8 servers, every reply tuple
// unique (open checks), no exhaustion.
func TestFiveTupleReuse_MoreThan64kFlowsPerIP(t *testing.T) {
	tab := newFlows()
	a := newAlloc(t, DefaultConfig(), tab)
	r := rng(6)
	const n = 200_000
	all := make([]flow, 0, n)
	for i := 0; i < n; i++ {
		x := r.next()
		f := flow{
			proto: tcp, src: v4(10, 128, byte(x>>8), byte(x)), sport: uint16(32768 + x>>16%28232),
			dst: v4(198, 51, 100, byte(i%8)), dport: 443, nat: egress,
		}
		mustOpen(t, a, tab, &f, r.next())
		all = append(all, f)
	}
	inUse := a.PortsInUse(egress, tcp)
	if inUse > 65535-1024+1 || inUse == 0 {
		t.Fatalf("PortsInUse = %d for %d flows", inUse, n)
	}
	if a.Exhausted(egress) != 0 || len(tab.m) != n {
		t.Fatalf("exhausted %d, tracked %d", a.Exhausted(egress), len(tab.m))
	}
	for i := range all {
		closeFlow(a, tab, &all[i])
	}
	if a.PortsInUse(egress, tcp) != 0 || a.StrayReleases() != 0 {
		t.Fatalf("after closing all: in use %d, stray %d", a.PortsInUse(egress, tcp), a.StrayReleases())
	}
}

// Exhaustion towards one destination endpoint is an error and counted per
// egress IP, while other destinations and other egress IPs still work, and
// a freed port is found again (by the bounded scan if random tries miss).
func TestExhaustionTowardsOneDestination(t *testing.T) {
	tab := newFlows()
	a := newAlloc(t, DefaultConfig(), tab)
	r := rng(7)
	const ports = 65535 - 1024 + 1
	all := fillRange(t, a, tab, 1024, 65535, func(i int) flow {
		return flow{proto: tcp, src: v4(10, 5, byte(i>>8), byte(i)), sport: 50000, dst: server1, dport: 443, nat: egress}
	}, &r)
	cases := []struct {
		name      string
		dst       Addr
		dport     uint16
		nat       Addr
		sport     uint16
		exhausted bool
	}{
		{"same destination", server1, 443, egress, 50000, true},
		{"same destination, privileged source still has 1–1023", server1, 443, egress, 22, false},
		{"same destination, other random source", server1, 443, egress, 12345, true},
		{"same host other port", server1, 444, egress, 50000, false},
		{"other host", server2, 443, egress, 50000, false},
		{"other egress IP", server1, 443, egress2, 50000, false},
	}
	want := a.Exhausted(egress) // fillRange's
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := flow{proto: tcp, src: pod1, sport: tc.sport, dst: tc.dst, dport: tc.dport, nat: tc.nat}
			open(t, a, tab, &f, r.next())
			if tc.exhausted != isExhausted(f.allocation) {
				t.Fatalf("Allocate: %v, want exhausted=%v", f.allocation, tc.exhausted)
			}
			if !tc.exhausted && f.allocation != nil {
				t.Fatal(f.allocation)
			}
			if tc.exhausted {
				want++
			}
			if got := a.Exhausted(egress); got != want {
				t.Fatalf("Exhausted(egress) = %d, want %d", got, want)
			}
		})
	}
	if a.Exhausted(egress2) != 0 {
		t.Fatalf("Exhausted(egress2) = %d", a.Exhausted(egress2))
	}
	// A repeated attempt towards the full destination fails without
	// searching again (no 64k-port scan under the IP's lock), also after a
	// flow towards another destination ended.
	other := flow{proto: tcp, src: pod2, sport: 50000, dst: server2, dport: 443, nat: egress}
	mustOpen(t, a, tab, &other, 1)
	closeFlow(a, tab, &other)
	calls := tab.calls
	retry := flow{proto: tcp, src: pod2, sport: 50001, dst: server1, dport: 443, nat: egress}
	if open(t, a, tab, &retry, 2); !isExhausted(retry.allocation) || tab.calls != calls {
		t.Fatalf("retry towards full destination: %v after %d InUse calls, want ErrExhausted after none", retry.allocation, tab.calls-calls)
	}
	// Free every eighth port: the next flow to server1 must find one (the
	// bounded search misses with probability (7/8)^273, about 1e-16).
	freed := map[uint16]bool{}
	for i := 0; i < ports; i += 8 {
		freed[all[i].natPort] = true
		closeFlow(a, tab, &all[i])
	}
	f := flow{proto: tcp, src: pod2, sport: 50000, dst: server1, dport: 443, nat: egress}
	if p := mustOpen(t, a, tab, &f, r.next()); !freed[p] {
		t.Fatalf("got port %d, which was not free", p)
	}
}

// fillRange opens flows mk(0), mk(1), ... towards one destination until the
// bounded search first finds no port, which must be when at least 95% of
// the range lo–hi is in use, then gives the flows left the ports left
// directly, as a whole-range scan would have: the range is then full.
func fillRange(t *testing.T, a *Allocator, tab *flows, lo, hi int, mk func(i int) flow, r *rng) []flow {
	t.Helper()
	n := hi - lo + 1
	all := make([]flow, 0, n)
	for i := 0; i < n; i++ {
		f := mk(i)
		if open(t, a, tab, &f, r.next()); f.allocation != nil {
			break
		}
		all = append(all, f)
	}
	if len(all) < n*95/100 {
		t.Fatalf("the bounded search gave up with %d of %d ports in use", len(all), n)
	}
	for p := lo; p <= hi && len(all) < n; p++ {
		f := mk(len(all))
		class, _ := classOf(f.proto)
		if !tab.insert(replyKey{f.proto, f.dst, f.dport, f.nat, uint16(p)}) {
			continue
		}
		f.natPort = uint16(p)
		st := a.lockedState(&f.nat)
		a.table(st, class).take(uint16(p))
		st.mu.Unlock()
		all = append(all, f)
	}
	return all
}

// Release balances Allocate: ports in use are counted per IP and protocol
// and fall back to zero.
func TestReleaseBalancesPortsInUse(t *testing.T) {
	tab := newFlows()
	a := newAlloc(t, DefaultConfig(), tab)
	var fs []flow
	// Three flows on port 40000 (three destinations), one on 40001, one UDP.
	for i, d := range []Addr{server1, server2, v4(203, 0, 113, 1)} {
		f := flow{proto: tcp, src: pod1, sport: 40000, dst: d, dport: 443, nat: egress}
		mustOpen(t, a, tab, &f, uint64(i))
		fs = append(fs, f)
	}
	g := flow{proto: tcp, src: pod1, sport: 40001, dst: server1, dport: 443, nat: egress}
	u := flow{proto: udp, src: pod1, sport: 40000, dst: server1, dport: 53, nat: egress}
	mustOpen(t, a, tab, &g, 9)
	mustOpen(t, a, tab, &u, 9)
	steps := []struct {
		close    *flow
		tcp, udp int
	}{
		{nil, 2, 1},
		{&fs[0], 2, 1},
		{&fs[1], 2, 1},
		{&fs[2], 1, 1},
		{&u, 1, 0},
		{&g, 0, 0},
	}
	for i, s := range steps {
		if s.close != nil {
			closeFlow(a, tab, s.close)
		}
		if gt, gu := a.PortsInUse(egress, tcp), a.PortsInUse(egress, udp); gt != s.tcp || gu != s.udp {
			t.Fatalf("step %d: PortsInUse tcp %d udp %d, want %d %d", i, gt, gu, s.tcp, s.udp)
		}
	}
}

func TestForgetOnlyIdleIPs(t *testing.T) {
	tab := newFlows()
	a := newAlloc(t, DefaultConfig(), tab)
	f := flow{proto: tcp, src: pod1, sport: 40000, dst: server1, dport: 443, nat: egress}
	mustOpen(t, a, tab, &f, 1)
	if a.Forget(egress) {
		t.Fatal("Forget dropped an IP with a live flow")
	}
	closeFlow(a, tab, &f)
	if !a.Forget(egress) || a.lookup(&egress) != nil {
		t.Fatal("Forget kept an idle IP")
	}
	// The IP comes back cleanly.
	g := flow{proto: tcp, src: pod1, sport: 40000, dst: server1, dport: 443, nat: egress}
	if p := mustOpen(t, a, tab, &g, 1); p != 40000 || a.PortsInUse(egress, tcp) != 1 {
		t.Fatalf("after Forget: port %d, in use %d", p, a.PortsInUse(egress, tcp))
	}
}

// Allocate and Release from several workers on shared egress IPs, run
// under -race by make test. Insert conflicts (two workers handed the same
// reply tuple between Allocate and Insert) are handled as the data plane
// does, by Release; in the end every count is back to zero.
func TestConcurrentAllocateRelease(t *testing.T) {
	tab := newFlows()
	cfg := DefaultConfig()
	cfg.UDPEndpointIndependent = true
	a := newAlloc(t, cfg, tab)
	const workers, perWorker = 8, 3000
	ips := []Addr{egress, egress2}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conflicts := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rng(100 + w)
			live := make([]flow, 0, 64)
			for i := 0; i < perWorker; i++ {
				x := r.next()
				f := flow{
					proto: []uint8{tcp, udp, icmp}[x%3], src: v4(10, byte(w), byte(x>>8), byte(x>>16)),
					sport: uint16(x >> 24), dst: v4(198, 51, 100, byte(x>>40%4)), dport: 443,
					nat: ips[x>>48%2],
				}
				p, err := a.Allocate(f.proto, f.src, f.sport, f.dst, f.dport, f.nat, r.next())
				if err != nil {
					t.Errorf("Allocate: %v", err)
					return
				}
				f.natPort = p
				if !tab.insert(replyKey{f.proto, f.dst, f.dport, f.nat, p}) {
					a.Release(f.proto, f.src, f.sport, f.dst, f.dport, f.nat, p)
					mu.Lock()
					conflicts++
					mu.Unlock()
					continue
				}
				live = append(live, f)
				if len(live) == cap(live) {
					for j := range live[:32] {
						closeFlow(a, tab, &live[j])
					}
					live = append(live[:0], live[32:]...)
				}
			}
			for j := range live {
				closeFlow(a, tab, &live[j])
			}
		}(w)
	}
	wg.Wait()
	for _, ip := range ips {
		for _, p := range []uint8{tcp, udp, icmp} {
			if n := a.PortsInUse(ip, p); n != 0 {
				t.Errorf("PortsInUse(%v, %d) = %d after all flows closed", ip, p, n)
			}
		}
	}
	if a.StrayReleases() != 0 {
		t.Errorf("StrayReleases = %d", a.StrayReleases())
	}
	t.Logf("%d insert conflicts in %d allocations", conflicts, workers*perWorker)
}

// Allocate (and Release) allocate nothing once the IP's tables exist.
func TestAllocateNoAllocsSteadyState(t *testing.T) {
	for _, eim := range []bool{false, true} {
		t.Run(fmt.Sprintf("UDPEndpointIndependent=%v", eim), func(t *testing.T) {
			tab := newFlows()
			cfg := DefaultConfig()
			cfg.UDPEndpointIndependent = eim
			a := newAlloc(t, cfg, tab)
			// Warm up: the port table and the EIM table at its working size.
			for i := 0; i < 100; i++ {
				f := flow{proto: udp, src: v4(10, 6, 0, byte(i)), sport: 40000, dst: server1, dport: 53, nat: egress}
				mustOpen(t, a, tab, &f, uint64(i))
				closeFlow(a, tab, &f)
			}
			busy := flow{proto: udp, src: pod2, sport: 40000, dst: server1, dport: 53, nat: egress}
			mustOpen(t, a, tab, &busy, 1)
			rnd := uint64(0)
			allocs := testing.AllocsPerRun(1000, func() {
				rnd++
				// Collides with busy, so preservation fails and the random path runs.
				p, err := a.Allocate(udp, pod1, 40000, server1, 53, egress, rnd)
				if err != nil {
					panic(err)
				}
				a.Release(udp, pod1, 40000, server1, 53, egress, p)
			})
			if allocs != 0 {
				t.Fatalf("Allocate+Release: %v allocations per run", allocs)
			}
		})
	}
}
