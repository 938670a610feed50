package lab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/egret-gw/egret/internal/nstest"
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

// testDNSName checks a destination given by DNS name (issue 30 item 4):
// an EgressIPTraffic naming the lab DNS's DNSName2, which partner-a's
// selector picks, makes w2-p3 leave as partner-a towards the address the
// name resolves to, a /32 inside partner-b's network; when the answer
// changes, new connections there follow partner-b again while one opened
// before keeps partner-a's source. The controller resolves the name from
// the lab's DNS (controller.yaml's dnsServer) with a 1 s TTL floor.
func testDNSName(t *testing.T, l *Lab) {
	s := l.Spec
	a, b := netip.MustParseAddr("192.0.2.105"), netip.MustParseAddr("192.0.2.106")
	dst := netip.AddrPortFrom(s.Server2.IP, HTTPPort).String()
	ns := s.NS("w2-p3")
	source := func() netip.Addr {
		got, err := HTTPSource(ns, dst, 2*time.Second)
		if err != nil {
			return netip.Addr{}
		}
		return got.Addr()
	}
	if got := source(); got != b {
		t.Fatalf("before: w2-p3 to %s seen as %v, want partner-b's %v", dst, got, b)
	}
	if err := l.SetDNS(DNSRecord{Name: DNSName2, TTL: time.Second, Addrs: []netip.Addr{s.Server2.IP}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.SetDNS(DNSRecord{Name: DNSName2, TTL: DNSTTL, Addrs: []netip.Addr{s.Server2.IP, s.Server2.IP6}}) // as the lab started
	})
	path := filepath.Join(ObjectsDir(l.RunDir()), "egressiptraffic-by-name.yaml")
	obj := "apiVersion: k8s.ovn.org/v1\nkind: EgressIPTraffic\nmetadata:\n  name: by-name\n  labels:\n    lab.egret.io/destination: server1\nspec:\n  dnsNames: [" + DNSName2 + "]\n"
	if err := os.WriteFile(path, []byte(obj), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
	nstest.UntilEvery(t, "w2-p3's new connections to "+dst+" leaving as partner-a (the name resolved to it)", 30*time.Second, 200*time.Millisecond, func() (bool, string) {
		got := source()
		return got == a, fmt.Sprintf("seen as %v", got)
	})
	kept, err := DialKeepAlive(ns, dst, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	before, err := kept.Get(2 * time.Second)
	if err != nil || before.Addr() != a {
		t.Fatalf("the kept connection is seen as %v (%v), want partner-a's %v", before, err, a)
	}

	// The name moves away: new connections to the old address are
	// partner-b's again; the kept one goes on as it was.
	if err := l.SetDNS(DNSRecord{Name: DNSName2, TTL: time.Second, Addrs: []netip.Addr{netip.MustParseAddr("203.0.113.99")}}); err != nil {
		t.Fatal(err)
	}
	nstest.UntilEvery(t, "w2-p3's new connections to "+dst+" leaving as partner-b again (the name moved)", 30*time.Second, 200*time.Millisecond, func() (bool, string) {
		got := source()
		return got == b, fmt.Sprintf("seen as %v", got)
	})
	after, err := kept.Get(2 * time.Second)
	if err != nil || after != before {
		t.Errorf("the connection opened before the change is seen as %v (%v), want %v as before", after, err, before)
	}
}
