package dnsres_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/dnsres"
	"golang.org/x/net/dns/dnsmessage"
)

func client(t *testing.T, servers ...netip.AddrPort) *dnsres.Client {
	t.Helper()
	c, err := dnsres.NewClient(servers, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func lookup(t *testing.T, c *dnsres.Client, name string) (dnsres.Answer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Lookup(ctx, name)
}

func TestLookupAAndAAAA(t *testing.T) {
	s := newServer(t)
	s.set("db.example.com", record{ttl: 300, addrs: addrs("192.0.2.2", "2001:db8::1", "192.0.2.1")})
	a, err := lookup(t, client(t, s.addr()), "DB.Example.com.")
	if err != nil {
		t.Fatal(err)
	}
	if want := addrs("192.0.2.1", "192.0.2.2", "2001:db8::1"); !slices.Equal(a.Addrs, want) || a.TTL != 300*time.Second {
		t.Errorf("got %v ttl %v, want %v ttl 5m", a.Addrs, a.TTL, want)
	}
	if udp, tcp := s.queries(); udp != 2 || tcp != 0 {
		t.Errorf("%d UDP and %d TCP queries, want 2 (A, AAAA) and 0", udp, tcp)
	}
}

// TestLookupSmallestTTL: the answer lasts as long as its shortest-lived
// record, a TTL of 0 included (the floor applies later).
func TestLookupSmallestTTL(t *testing.T) {
	s := newServer(t)
	c := client(t, s.addr())
	for _, tc := range []struct {
		ttl, ttl6 uint32
		want      time.Duration
	}{{0, 300, 0}, {300, 20, 20 * time.Second}, {20, 300, 20 * time.Second}} {
		s.set("db.example.com", record{ttl: tc.ttl, ttl6: tc.ttl6, addrs: addrs("192.0.2.1", "2001:db8::1")})
		if a, err := lookup(t, c, "db.example.com"); err != nil || a.TTL != tc.want {
			t.Errorf("A TTL %d, AAAA TTL %d: got %v (%v), want %v", tc.ttl, tc.ttl6, a.TTL, err, tc.want)
		}
	}
}

func TestLookupCNAMEChain(t *testing.T) {
	s := newServer(t)
	// www → edge (in the same answer) → lb (asked for separately) → addresses.
	s.set("www.example.com", record{ttl: 600, cname: "edge.example.net", inline: true})
	s.set("edge.example.net", record{ttl: 120, cname: "lb.example.org"})
	s.set("lb.example.org", record{ttl: 900, addrs: addrs("198.51.100.7", "2001:db8::7")})
	s.set("other.example.com", record{ttl: 5, addrs: addrs("203.0.113.1")})
	a, err := lookup(t, client(t, s.addr()), "www.example.com")
	if err != nil {
		t.Fatal(err)
	}
	// The smallest TTL of the chain: the alias may change before the addresses.
	if want := addrs("198.51.100.7", "2001:db8::7"); !slices.Equal(a.Addrs, want) || a.TTL != 120*time.Second {
		t.Errorf("got %v ttl %v, want %v ttl 2m", a.Addrs, a.TTL, want)
	}
}

func TestLookupCNAMELoop(t *testing.T) {
	s := newServer(t)
	s.set("a.example.com", record{ttl: 60, cname: "b.example.com"})
	s.set("b.example.com", record{ttl: 60, cname: "a.example.com"})
	if _, err := lookup(t, client(t, s.addr()), "a.example.com"); err == nil || !strings.Contains(err.Error(), "CNAMEs") {
		t.Errorf("a CNAME loop gave %v, want an error about the CNAMEs", err)
	}
}

func TestLookupTruncatedUsesTCP(t *testing.T) {
	s := newServer(t)
	s.set("big.example.com", record{ttl: 60, truncate: true, addrs: addrs("192.0.2.10", "2001:db8::10")})
	a, err := lookup(t, client(t, s.addr()), "big.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if want := addrs("192.0.2.10", "2001:db8::10"); !slices.Equal(a.Addrs, want) {
		t.Errorf("got %v, want %v", a.Addrs, want)
	}
	if udp, tcp := s.queries(); udp != 2 || tcp != 2 {
		t.Errorf("%d UDP and %d TCP queries, want 2 and 2 (each truncated answer asked again over TCP)", udp, tcp)
	}
}

func TestLookupNXDOMAIN(t *testing.T) {
	s := newServer(t)
	_, err := lookup(t, client(t, s.addr()), "gone.example.com")
	if !errors.Is(err, dnsres.ErrNotFound) || !strings.Contains(err.Error(), "NXDOMAIN") {
		t.Errorf("got %v, want ErrNotFound (NXDOMAIN)", err)
	}
	// An alias of a name that does not exist does not exist either.
	s.set("alias.example.com", record{ttl: 60, cname: "gone.example.com"})
	if _, err := lookup(t, client(t, s.addr()), "alias.example.com"); !errors.Is(err, dnsres.ErrNotFound) {
		t.Errorf("alias of a missing name: got %v, want ErrNotFound", err)
	}
}

func TestLookupNoAddressIsNotFound(t *testing.T) {
	s := newServer(t)
	s.set("mail.example.com", record{ttl: 60}) // exists, no A nor AAAA
	if _, err := lookup(t, client(t, s.addr()), "mail.example.com"); !errors.Is(err, dnsres.ErrNotFound) {
		t.Errorf("got %v, want ErrNotFound", err)
	}
}

func TestLookupNextServerOnFailure(t *testing.T) {
	bad, good := newServer(t), newServer(t)
	bad.set("db.example.com", record{rcode: dnsmessage.RCodeServerFailure})
	good.set("db.example.com", record{ttl: 60, addrs: addrs("192.0.2.1")})
	a, err := lookup(t, client(t, bad.addr(), good.addr()), "db.example.com")
	if err != nil || !slices.Equal(a.Addrs, addrs("192.0.2.1")) {
		t.Errorf("got %v, %v; want the second server's answer", a.Addrs, err)
	}
	// Every server failing is an error that names each.
	_, err = lookup(t, client(t, bad.addr()), "db.example.com")
	if err == nil || errors.Is(err, dnsres.ErrNotFound) || !strings.Contains(err.Error(), "answer ServerFailure to db.example.com A") {
		t.Errorf("SERVFAIL gave %v", err)
	}
}

// TestLookupErrorIsStable: the controller reports an error again only when
// its text changes, so two failures alike must read alike (a socket error
// names an ephemeral port that changes every time).
func TestLookupErrorIsStable(t *testing.T) {
	s := newServer(t)
	s.drop(true)
	c, err := dnsres.NewClient([]netip.AddrPort{s.addr()}, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// A closed port: the kernel answers ICMP port unreachable.
	l, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := netip.MustParseAddrPort(l.LocalAddr().String())
	l.Close()
	shortC, err := dnsres.NewClient([]netip.AddrPort{closed}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*dnsres.Client{shortC, c} {
		_, err1 := lookup(t, c, "db.example.com")
		_, err2 := lookup(t, c, "db.example.com")
		t.Log(err1)
		if err1 == nil || err1.Error() != err2.Error() {
			t.Errorf("two failures read differently:\n%v\n%v", err1, err2)
		}
	}
}

func TestResolvConfServers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(p, []byte("search cluster.local\nnameserver 10.96.0.10\n# nameserver 1.1.1.1\nnameserver fe80::1%eth0\nnameserver bogus\noptions ndots:5\n"), 0o644)
	got, err := dnsres.ResolvConfServers(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.AddrPort{netip.MustParseAddrPort("10.96.0.10:53"), netip.MustParseAddrPort("[fe80::1%eth0]:53")}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	os.WriteFile(p, []byte("search x\n"), 0o644)
	if got, _ := dnsres.ResolvConfServers(p); len(got) != 2 || got[0].Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("a file without nameserver gave %v, want the loopback defaults", got)
	}
}

func TestParseServer(t *testing.T) {
	for in, want := range map[string]string{"192.0.2.53": "192.0.2.53:53", "192.0.2.53:5353": "192.0.2.53:5353", "[2001:db8::53]:53": "[2001:db8::53]:53", "2001:db8::53": "[2001:db8::53]:53"} {
		if got, err := dnsres.ParseServer(in); err != nil || got.String() != want {
			t.Errorf("ParseServer(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "dns.example.com", "192.0.2.53:x"} {
		if _, err := dnsres.ParseServer(in); err == nil {
			t.Errorf("ParseServer(%q) accepted", in)
		}
	}
}
