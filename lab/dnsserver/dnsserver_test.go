package dnsserver

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// resolver is Go's own DNS client pointed at s: an implementation written
// independently of the server, which also retries over TCP on truncation.
func resolver(s *Server) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, s.Addr().String())
	}}
}

func start(t *testing.T) *Server {
	t.Helper()
	s, err := New("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// query sends one question over UDP and parses the answer.
func query(t *testing.T, s *Server, name string, typ dnsmessage.Type, edns int) dnsmessage.Message {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET})
	if edns > 0 {
		b.StartAdditionals()
		var rh dnsmessage.ResourceHeader
		rh.SetEDNS0(edns, dnsmessage.RCodeSuccess, false)
		b.OPTResource(rh, dnsmessage.OPTResource{})
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("udp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:n]); err != nil {
		t.Fatalf("unpack the answer: %v", err)
	}
	if m.ID != 7 || !m.Response {
		t.Fatalf("answer header %+v: want a response to query 7", m.Header)
	}
	return m
}

func addrs(t *testing.T, s *Server, name string) []netip.Addr {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := resolver(s).LookupNetIP(ctx, "ip", name)
	if err != nil {
		t.Fatalf("look up %s: %v", name, err)
	}
	slices.SortFunc(got, netip.Addr.Compare)
	return got
}

func TestAAndAAAA(t *testing.T) {
	s := start(t)
	a4, a6 := netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8:5200::10")
	s.Set("Echo.Lab.Egret.Test", 30*time.Second, a4, a6)
	if got := addrs(t, s, "echo.lab.egret.test."); !slices.Equal(got, []netip.Addr{a4, a6}) {
		t.Fatalf("addresses %v, want %v and %v", got, a4, a6)
	}
	m := query(t, s, "echo.lab.egret.test.", dnsmessage.TypeA, 0)
	if m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 1 || !m.Authoritative {
		t.Fatalf("A answer %+v", m)
	}
	if a, ok := m.Answers[0].Body.(*dnsmessage.AResource); !ok || netip.AddrFrom4(a.A) != a4 || m.Answers[0].Header.TTL != 30 {
		t.Fatalf("A record %v, want %v with TTL 30", m.Answers[0], a4)
	}
	m = query(t, s, "echo.lab.egret.test.", dnsmessage.TypeAAAA, 0)
	if len(m.Answers) != 1 {
		t.Fatalf("AAAA answers %v", m.Answers)
	}
	if a, ok := m.Answers[0].Body.(*dnsmessage.AAAAResource); !ok || netip.AddrFrom16(a.AAAA) != a6 {
		t.Fatalf("AAAA record %v, want %v", m.Answers[0], a6)
	}
}

func TestSetReplacesAndForgets(t *testing.T) {
	s := start(t)
	one, two := netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("203.0.113.10")
	s.Set("echo.lab.egret.test", time.Minute, one)
	if got := addrs(t, s, "echo.lab.egret.test."); !slices.Equal(got, []netip.Addr{one}) {
		t.Fatalf("first answer %v, want %v", got, one)
	}
	s.Set("echo.lab.egret.test", 5*time.Second, two)
	m := query(t, s, "echo.lab.egret.test.", dnsmessage.TypeA, 0)
	if len(m.Answers) != 1 || m.Answers[0].Header.TTL != 5 || netip.AddrFrom4(m.Answers[0].Body.(*dnsmessage.AResource).A) != two {
		t.Fatalf("after Set: %v, want %v with TTL 5", m.Answers, two)
	}
	s.Set("echo.lab.egret.test", time.Minute)
	if m := query(t, s, "echo.lab.egret.test.", dnsmessage.TypeA, 0); m.RCode != dnsmessage.RCodeNameError {
		t.Fatalf("a forgotten name answers %v, want NXDOMAIN", m.RCode)
	}
}

func TestUnknownNameAndNoData(t *testing.T) {
	s := start(t)
	s.Set("v4only.lab.egret.test", time.Minute, netip.MustParseAddr("192.0.2.1"))
	m := query(t, s, "other.lab.egret.test.", dnsmessage.TypeA, 0)
	if m.RCode != dnsmessage.RCodeNameError || len(m.Answers) != 0 {
		t.Fatalf("unknown name: %v %v, want NXDOMAIN", m.RCode, m.Answers)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := resolver(s).LookupNetIP(ctx, "ip", "other.lab.egret.test.")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("Go's resolver on an unknown name: %v, want not found", err)
	}
	m = query(t, s, "v4only.lab.egret.test.", dnsmessage.TypeAAAA, 0)
	if m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 0 {
		t.Fatalf("AAAA of an IPv4-only name: %v %v, want NOERROR and no answer", m.RCode, m.Answers)
	}
}

func TestCNAMEChain(t *testing.T) {
	s := start(t)
	a := netip.MustParseAddr("203.0.113.10")
	s.Set("server2.lab.egret.test", time.Minute, a)
	if err := s.CNAME("mid.lab.egret.test", time.Minute, "server2.lab.egret.test"); err != nil {
		t.Fatal(err)
	}
	if err := s.CNAME("www.lab.egret.test", 20*time.Second, "mid.lab.egret.test."); err != nil {
		t.Fatal(err)
	}
	if got := addrs(t, s, "www.lab.egret.test."); !slices.Equal(got, []netip.Addr{a}) {
		t.Fatalf("through two CNAMEs: %v, want %v", got, a)
	}
	m := query(t, s, "www.lab.egret.test.", dnsmessage.TypeA, 0)
	if len(m.Answers) != 3 || m.Answers[0].Header.Type != dnsmessage.TypeCNAME || m.Answers[0].Header.TTL != 20 || m.Answers[2].Header.Type != dnsmessage.TypeA {
		t.Fatalf("answers %v: want CNAME (TTL 20), CNAME, A", m.Answers)
	}
	if err := s.CNAME("loop.lab.egret.test", time.Minute, "loop.lab.egret.test"); err != nil {
		t.Fatal(err)
	}
	if m := query(t, s, "loop.lab.egret.test.", dnsmessage.TypeA, 0); m.RCode != dnsmessage.RCodeServerFailure {
		t.Fatalf("a CNAME loop answers %v, want SERVFAIL", m.RCode)
	}
	for _, bad := range []string{string(make([]byte, 300)), "empty..label.test"} {
		if err := s.CNAME("bad.lab.egret.test", time.Minute, bad); err == nil {
			t.Errorf("CNAME target %q was accepted", bad)
		}
	}
}

// TestTruncation: 60 A records do not fit 512 bytes; over UDP the answer
// is cut with TC set, and a client that retries over TCP gets all of them.
func TestTruncation(t *testing.T) {
	s := start(t)
	var many []netip.Addr
	for i := range 60 {
		many = append(many, netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)}))
	}
	s.Set("many.lab.egret.test", time.Minute, many...)
	m := query(t, s, "many.lab.egret.test.", dnsmessage.TypeA, 0)
	if !m.Truncated || len(m.Answers) == 0 || len(m.Answers) >= 60 {
		t.Fatalf("UDP answer without EDNS0: truncated=%v with %d records, want TC and fewer than 60", m.Truncated, len(m.Answers))
	}
	if m := query(t, s, "many.lab.egret.test.", dnsmessage.TypeA, 4096); m.Truncated || len(m.Answers) != 60 {
		t.Fatalf("UDP answer with a 4096-byte EDNS0 buffer: truncated=%v with %d records, want all 60", m.Truncated, len(m.Answers))
	}
	if got := addrs(t, s, "many.lab.egret.test."); !slices.Equal(got, many) {
		t.Fatalf("Go's resolver got %d addresses, want all 60", len(got))
	}
}

func TestFail(t *testing.T) {
	s := start(t)
	a := netip.MustParseAddr("203.0.113.10")
	s.Set("echo.lab.egret.test", time.Minute, a)
	s.Fail("echo.lab.egret.test")
	if m := query(t, s, "echo.lab.egret.test.", dnsmessage.TypeA, 0); m.RCode != dnsmessage.RCodeServerFailure {
		t.Fatalf("after Fail: %v, want SERVFAIL", m.RCode)
	}
	s.Set("echo.lab.egret.test", time.Minute, a)
	if got := addrs(t, s, "echo.lab.egret.test."); !slices.Equal(got, []netip.Addr{a}) {
		t.Fatalf("after Set again: %v, want %v", got, a)
	}
}

// TestBadInput: garbage is dropped or answered FORMERR; the server keeps
// serving.
func TestBadInput(t *testing.T) {
	s := start(t)
	s.Set("echo.lab.egret.test", time.Minute, netip.MustParseAddr("192.0.2.1"))
	c, err := net.Dial("udp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A header and a question cut short: FORMERR.
	c.Write([]byte{0, 9, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4, 'e'})
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:n]); err != nil || m.RCode != dnsmessage.RCodeFormatError || m.ID != 9 {
		t.Fatalf("answer to a cut question: %v %+v, want FORMERR for id 9", err, m.Header)
	}
	c.Write([]byte{1, 2, 3}) // not even a header: dropped
	tc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc.Write([]byte{0xff, 0xff, 1}) // a TCP length beyond any query: closed
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := tc.Read(buf); err == nil {
		t.Fatal("a TCP query of 65535 bytes got an answer")
	}
	tc.Close()
	if got := addrs(t, s, "echo.lab.egret.test."); len(got) != 1 {
		t.Fatalf("after bad input: %v", got)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New("localhost:53"); err == nil {
		t.Fatal("New accepted a host name")
	}
	s := start(t)
	if _, err := New(s.Addr().String()); err == nil {
		t.Fatal("New on a port in use succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}
