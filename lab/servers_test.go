package lab

import (
	"encoding/json"
	"maps"
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// TestSecondServer checks the lab's second outside server (issue 30):
// `egret lab status --json` lists both servers under "servers" with the
// keys "server" has, and every node (workers, gateways, the controller's
// namespace) and a pod reach the second server, its excluded address and
// the first over IPv4 and IPv6 through the router, seen with the address
// they leave with; and the lab's DNS (testLabDNS). It runs in kernel mode:
// routing, not the control plane.
func TestSecondServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a lab; skipped with -short")
	}
	requireRoot(t)
	requireTools(t, "ip", "bridge", "nft", "ethtool", "sysctl")
	l := upLab(t, testLabName("2"), ModeKernel)
	s := l.Spec
	t.Run("DNS", func(t *testing.T) { testLabDNS(t, l) })

	out, err := exec.Command(l.Binary, "lab", "status", "--name", s.Name, "--json").Output()
	if err != nil {
		t.Fatalf("egret lab status --json: %v", err)
	}
	var raw struct {
		Server  map[string]any   `json:"server"`
		Servers []map[string]any `json:"servers"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if len(raw.Servers) != 2 {
		t.Fatalf("status lists %d servers, want 2:\n%s", len(raw.Servers), out)
	}
	keys := slices.Sorted(maps.Keys(raw.Server))
	for _, k := range []string{"ip", "ip6", "httpPort", "udpPort"} {
		if !slices.Contains(keys, k) {
			t.Errorf("server lacks key %q: %v", k, keys)
		}
	}
	for i, v := range raw.Servers {
		if got := slices.Sorted(maps.Keys(v)); !slices.Equal(got, keys) {
			t.Errorf("servers[%d] has keys %v, server has %v", i, got, keys)
		}
	}
	if !maps.Equal(raw.Servers[0], raw.Server) {
		t.Errorf("servers[0] %v is not server %v", raw.Servers[0], raw.Server)
	}
	if raw.Servers[1]["ip"] != "203.0.113.10" || raw.Servers[1]["ip6"] != "2001:db8:5200::10" || raw.Servers[1]["httpPort"] != float64(HTTPPort) || raw.Servers[1]["udpPort"] != float64(UDPPort) {
		t.Errorf("servers[1] = %v, want 203.0.113.10 and 2001:db8:5200::10 on ports %d/%d", raw.Servers[1], HTTPPort, UDPPort)
	}

	// From every node: each server (and the excluded address) over each
	// family, seen with the node's own address of that family.
	type from struct {
		ns       string
		ip4, ip6 netip.Addr
	}
	var froms []from
	for _, w := range s.Workers {
		froms = append(froms, from{s.NS(w.Name), w.IP, w.IP6})
	}
	for _, g := range s.Gateways {
		froms = append(froms, from{s.NS(g.Name), g.IP, g.IP6})
	}
	froms = append(froms, from{s.NS(s.Controller.Name), s.Controller.IP, s.Controller.IP6})
	w2 := s.Workers[1]
	// w2-p2 is selected by no policy: it leaves as its node, both families.
	froms = append(froms, from{s.NS("w2-p2"), w2.IP, w2.IP6})
	dsts := []netip.Addr{s.Server.IP, s.Server.IP6, s.Server2.IP, s.Server2.IP6, s.Server2.Excluded}
	for _, f := range froms {
		for _, d := range dsts {
			want := f.ip4
			if d.Is6() {
				want = f.ip6
			}
			got, err := probeTwice(func() (netip.AddrPort, error) {
				return HTTPSource(f.ns, netip.AddrPortFrom(d, HTTPPort).String(), 2*time.Second)
			})
			if err != nil || got.Addr() != want {
				t.Errorf("HTTP from %s to %v: seen as %v (%v), want %v", f.ns, d, got, err, want)
			}
			got, err = probeTwice(func() (netip.AddrPort, error) {
				return UDPSource(f.ns, netip.AddrPortFrom(d, UDPPort).String(), time.Second)
			})
			if err != nil || got.Addr() != want {
				t.Errorf("UDP from %s to %v: seen as %v (%v), want %v", f.ns, d, got, err, want)
			}
		}
	}
	// A steered pod (static policy blue) reaches the second server through
	// its gateway, as its egress IP.
	p := s.Workers[0].Pods[0]
	egress, _, _ := s.Steering(p)
	if got, err := HTTPSource(s.NS(p.Name), netip.AddrPortFrom(s.Server2.IP, HTTPPort).String(), 2*time.Second); err != nil || got.Addr() != egress {
		t.Errorf("HTTP from %s to the second server: seen as %v (%v), want %v", p.Name, got, err, egress)
	}
}

// probeTwice allows one lost first packet (a neighbour being resolved).
func probeTwice(probe func() (netip.AddrPort, error)) (netip.AddrPort, error) {
	a, err := probe()
	if err != nil {
		a, err = probe()
	}
	return a, err
}

// testLabDNS checks the lab's DNS server from the controller's namespace:
// the names it starts with, and SetDNS changing an answer and its TTL,
// failing a name and removing it.
func testLabDNS(t *testing.T, l *Lab) {
	s := l.Spec
	ns := s.NS(s.Controller.Name)
	st, err := l.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.DNS.Addr != s.DNSAddr() || !slices.Contains(st.DNS.Names, DNSName) {
		t.Errorf("status DNS %+v", st.DNS)
	}
	addrs := func(name string, typ dnsmessage.Type) ([]netip.Addr, dnsmessage.RCode, uint32) {
		t.Helper()
		m, err := QueryDNS(ns, s.DNSAddr(), name, typ, 2*time.Second)
		if err != nil {
			t.Fatalf("query %s: %v", name, err)
		}
		var out []netip.Addr
		var ttl uint32
		for _, a := range m.Answers {
			ttl = a.Header.TTL
			switch b := a.Body.(type) {
			case *dnsmessage.AResource:
				out = append(out, netip.AddrFrom4(b.A))
			case *dnsmessage.AAAAResource:
				out = append(out, netip.AddrFrom16(b.AAAA))
			}
		}
		return out, m.RCode, ttl
	}
	if got, _, ttl := addrs(DNSName, dnsmessage.TypeA); !slices.Equal(got, []netip.Addr{s.Server.IP}) || ttl != uint32(DNSTTL/time.Second) {
		t.Errorf("%s A: %v TTL %d, want %v TTL %v", DNSName, got, ttl, s.Server.IP, DNSTTL)
	}
	if got, _, _ := addrs(DNSName2, dnsmessage.TypeAAAA); !slices.Equal(got, []netip.Addr{s.Server2.IP6}) {
		t.Errorf("%s AAAA: %v, want %v", DNSName2, got, s.Server2.IP6)
	}
	if got, _, _ := addrs(DNSAlias, dnsmessage.TypeA); !slices.Equal(got, []netip.Addr{s.Server.IP}) {
		t.Errorf("%s (CNAME) A: %v, want %v", DNSAlias, got, s.Server.IP)
	}
	// The answer moves to the second server, with another TTL.
	if err := l.SetDNS(DNSRecord{Name: DNSName, TTL: 7 * time.Second, Addrs: []netip.Addr{s.Server2.IP}}); err != nil {
		t.Fatal(err)
	}
	if got, rc, ttl := addrs(DNSName, dnsmessage.TypeA); !slices.Equal(got, []netip.Addr{s.Server2.IP}) || ttl != 7 || rc != dnsmessage.RCodeSuccess {
		t.Errorf("after SetDNS: %v TTL %d (%v), want %v TTL 7", got, ttl, rc, s.Server2.IP)
	}
	if got, _, _ := addrs(DNSName, dnsmessage.TypeAAAA); len(got) != 0 {
		t.Errorf("after SetDNS to an IPv4 address only, AAAA answers %v", got)
	}
	// The command does the same (egret lab dns).
	if out, err := exec.Command(l.Binary, "lab", "dns", "--name", s.Name, "--host", DNSName, "--fail").CombinedOutput(); err != nil {
		t.Fatalf("egret lab dns --fail: %v\n%s", err, out)
	}
	if _, rc, _ := addrs(DNSName, dnsmessage.TypeA); rc != dnsmessage.RCodeServerFailure {
		t.Errorf("after Fail: %v, want SERVFAIL", rc)
	}
	if err := l.SetDNS(DNSRecord{Name: DNSName}); err != nil {
		t.Fatal(err)
	}
	if _, rc, _ := addrs(DNSName, dnsmessage.TypeA); rc != dnsmessage.RCodeNameError {
		t.Errorf("after removal: %v, want NXDOMAIN", rc)
	}
	if got, _, _ := addrs(DNSName2, dnsmessage.TypeA); !slices.Equal(got, []netip.Addr{s.Server2.IP}) {
		t.Errorf("the other names changed: %s A %v", DNSName2, got)
	}
	if err := l.SetDNS(DNSRecord{Name: "bad name..", Addrs: []netip.Addr{s.Server.IP}}); err == nil {
		t.Error("SetDNS accepted a bad name")
	}
}

// TestDNSRecords checks the records file's rules without a lab: what a
// record may hold, and that a file with a bad record is refused whole.
func TestDNSRecords(t *testing.T) {
	a := netip.MustParseAddr("203.0.113.10")
	for _, r := range []DNSRecord{
		{Name: "", Addrs: []netip.Addr{a}},
		{Name: "bad..name", Addrs: []netip.Addr{a}},
		{Name: DNSName, Addrs: []netip.Addr{a}, CNAME: DNSName2},
		{Name: DNSName, Fail: true, CNAME: DNSName2},
		{Name: DNSName, TTL: -time.Second, Addrs: []netip.Addr{a}},
		{Name: DNSName, Addrs: []netip.Addr{{}}},
	} {
		if err := r.validate(); err == nil {
			t.Errorf("record %+v accepted", r)
		}
	}
	s, err := DefaultSpec("egl")
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/dns.json"
	recs := defaultDNSRecords(s)
	if err := writeDNSRecords(path, recs); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDNSRecords(path)
	if err != nil || len(got) != 3 || got[0].Name != DNSName || !slices.Equal(got[0].Addrs, []netip.Addr{s.Server.IP, s.Server.IP6}) ||
		got[1].CNAME != DNSName || got[2].Name != DNSName2 || got[2].TTL != DNSTTL {
		t.Fatalf("records read back: %+v (%v), want %+v", got, err, recs)
	}
	if err := writeDNSRecords(path, append(recs, DNSRecord{Name: "x..y", Fail: true})); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDNSRecords(path); err == nil {
		t.Error("a records file with a bad name was read")
	}
}
