package lab

import (
	"net/netip"
	"testing"
	"time"
)

// testByDestination checks egress by destination on the managed lab (issue
// 30), with deploy/examples/lab/partner.yaml: pod w2-p3 leaves as
// partner-a's egress IP towards the first server, as partner-b's towards
// the second, and as its node towards the address partner-b excludes; a
// pod whose object has no trafficSelector (blue) leaves as its object's
// egress IPs towards both servers. The expected sources are written here
// from the manifests, not computed by the egress plan. Every probe is a
// new connection (HTTP) or a new socket (UDP), a few of each, so that no
// single lucky flow passes.
//
// It needs the whole feature: the Dir source reading EgressIPTraffic, the
// steer agent classifying by destination, the gateway accepting a pod's
// flow only for the destinations its object owns.
func testByDestination(t *testing.T, l *Lab, st *Status) {
	s := l.Spec
	a, b := netip.MustParseAddr("192.0.2.105"), netip.MustParseAddr("192.0.2.106")
	w2 := s.Workers[1]
	if w2.Name != "w2" || s.Server2.Excluded != netip.MustParseAddr("203.0.113.11") {
		t.Fatalf("the lab's topology changed (worker %s, excluded %v): update this test", w2.Name, s.Server2.Excluded)
	}
	for _, ip := range []netip.Addr{a, b} {
		assigned := false
		for _, x := range st.Assignment {
			assigned = assigned || (x.IP == ip && x.Node != "")
		}
		if !assigned {
			t.Fatalf("%v is not assigned to a gateway: %+v", ip, st.Assignment)
		}
	}
	blue := map[netip.Addr]bool{netip.MustParseAddr("192.0.2.101"): true, netip.MustParseAddr("192.0.2.103"): true}
	cases := []struct {
		pod  string
		dst  netip.Addr
		want func(netip.Addr) bool
		what string
	}{
		{"w2-p3", s.Server.IP, func(x netip.Addr) bool { return x == a }, "partner-a's " + a.String()},
		{"w2-p3", s.Server2.IP, func(x netip.Addr) bool { return x == b }, "partner-b's " + b.String()},
		{"w2-p3", s.Server2.Excluded, func(x netip.Addr) bool { return x == w2.IP }, "its node's " + w2.IP.String() + " (excluded)"},
		{"w1-p1", s.Server2.IP, func(x netip.Addr) bool { return blue[x] }, "one of blue's egress IPs"},
	}
	for _, c := range cases {
		ns := s.NS(c.pod)
		for i := range 4 {
			got, err := probeTwice(func() (netip.AddrPort, error) {
				return HTTPSource(ns, netip.AddrPortFrom(c.dst, HTTPPort).String(), 2*time.Second)
			})
			if err != nil || !c.want(got.Addr()) {
				t.Errorf("HTTP #%d from %s to %v: seen as %v (%v), want %s", i, c.pod, c.dst, got, err, c.what)
			}
			got, err = probeTwice(func() (netip.AddrPort, error) {
				return UDPSource(ns, netip.AddrPortFrom(c.dst, UDPPort).String(), time.Second)
			})
			if err != nil || !c.want(got.Addr()) {
				t.Errorf("UDP #%d from %s to %v: seen as %v (%v), want %s", i, c.pod, c.dst, got, err, c.what)
			}
		}
	}
}
