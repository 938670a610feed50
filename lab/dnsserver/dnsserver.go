// Package dnsserver is the lab's authoritative DNS server: A and AAAA
// records (and CNAMEs) whose answers and TTLs a test changes while it
// runs, so that a resolver can be checked against a real server on a real
// socket. It serves UDP and, on the same port, TCP; a UDP answer larger
// than the client's buffer (512 bytes, or its EDNS0 size) is cut and
// marked truncated, as a real server does, so that the client retries over
// TCP.
//
// It answers only for the names it was given: any other name is
// NXDOMAIN; a known name without a record of the asked type gets an empty
// answer (NODATA).
package dnsserver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// maxTCPMessage bounds a query read over TCP: a query is one question
// (and perhaps an OPT record), far below this.
const maxTCPMessage = 4096

// maxUDPSize caps the EDNS0 size a client may ask for.
const maxUDPSize = 4096

// record is what one name answers.
type record struct {
	ttl   uint32
	addrs []netip.Addr
	// cname, when set, is the name this one is an alias of (addrs unset).
	cname dnsmessage.Name
	// rcode, when not RCodeSuccess, is the error every query for the name
	// gets (Fail).
	rcode dnsmessage.RCode
}

// Server is a running DNS server; its methods are safe for concurrent use.
type Server struct {
	udp  net.PacketConn
	tcp  net.Listener
	addr netip.AddrPort

	mu      sync.Mutex
	records map[string]record // by canonical name (lower case, with the final dot)
	conns   map[net.Conn]struct{}

	wg     sync.WaitGroup
	closed atomic.Bool
}

// New starts a server on addr ("ip:port"; port 0 picks a free one, the
// same for UDP and TCP). It answers NXDOMAIN until Set gives it names.
func New(addr string) (*Server, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dns server address %q: want ip:port: %w", addr, err)
	}
	var udp net.PacketConn
	var tcp net.Listener
	// With port 0 the UDP port the kernel picks may be taken for TCP:
	// try a few times for one free in both.
	for try := 0; ; try++ {
		udp, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
		if err != nil {
			return nil, fmt.Errorf("dns server: %w", err)
		}
		bound := udp.LocalAddr().(*net.UDPAddr).AddrPort()
		tcp, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(ap.Addr(), bound.Port())))
		if err == nil {
			ap = netip.AddrPortFrom(ap.Addr(), bound.Port())
			break
		}
		udp.Close()
		if ap.Port() != 0 || try == 9 {
			return nil, fmt.Errorf("dns server: %w", err)
		}
	}
	s := &Server{udp: udp, tcp: tcp, addr: ap, records: map[string]record{}, conns: map[net.Conn]struct{}{}}
	s.wg.Add(2)
	go s.serveUDP()
	go s.serveTCP()
	return s, nil
}

// Addr is the address the server listens on, UDP and TCP.
func (s *Server) Addr() netip.AddrPort { return s.addr }

// Set makes name answer addrs (A for the IPv4 ones, AAAA for the IPv6
// ones) with ttl, replacing what it answered before; with no addrs the name
// is forgotten (NXDOMAIN). The TTL is rounded down to whole seconds.
func (s *Server) Set(name string, ttl time.Duration, addrs ...netip.Addr) {
	key := canonical(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(addrs) == 0 {
		delete(s.records, key)
		return
	}
	unmapped := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		unmapped[i] = a.Unmap()
	}
	s.records[key] = record{ttl: seconds(ttl), addrs: unmapped}
}

// CNAME makes name an alias of target with ttl: a query for name answers
// the CNAME and then target's records, as far as this server knows them
// (a chain is followed here up to 8 links).
func (s *Server) CNAME(name string, ttl time.Duration, target string) error {
	t, err := dnsmessage.NewName(canonical(target))
	if err == nil {
		// NewName checks the length only; a question holding the name
		// checks its labels as an answer would need them.
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{})
		b.StartQuestions()
		err = b.Question(dnsmessage.Question{Name: t, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	}
	if err != nil {
		return fmt.Errorf("CNAME target %q: %w", target, err)
	}
	s.mu.Lock()
	s.records[canonical(name)] = record{ttl: seconds(ttl), cname: t}
	s.mu.Unlock()
	return nil
}

// Fail makes every query for name answer SERVFAIL until the next Set or
// CNAME for it: a broken upstream, for a resolver's failure path.
func (s *Server) Fail(name string) {
	s.mu.Lock()
	s.records[canonical(name)] = record{rcode: dnsmessage.RCodeServerFailure}
	s.mu.Unlock()
}

// Close stops the server and waits for its goroutines.
func (s *Server) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	err := errors.Join(s.udp.Close(), s.tcp.Close())
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func seconds(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	return uint32(min(d/time.Second, 1<<31-1))
}

// canonical is the map key of a name: lower case, ending in a dot.
func canonical(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

func (s *Server) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, from, err := s.udp.ReadFrom(buf)
		if err != nil {
			if s.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if out, ok := s.answer(buf[:n], true); ok {
			s.udp.WriteTo(out, from)
		}
	}
}

func (s *Server) serveTCP() {
	defer s.wg.Done()
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			if s.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s.mu.Lock()
		if s.closed.Load() {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		conns.Add(1)
		go func() {
			defer conns.Done()
			s.serveConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// serveConn answers length-prefixed queries (RFC 1035 4.2.2) until the
// client closes, is idle for 10 s, or the server closes (Close closes c).
func (s *Server) serveConn(c net.Conn) {
	defer c.Close()
	var hdr [2]byte
	buf := make([]byte, maxTCPMessage)
	for {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(hdr[:]))
		if n > len(buf) {
			return
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return
		}
		out, ok := s.answer(buf[:n], false)
		if !ok {
			return
		}
		msg := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(out)), uint16(len(out)))
		if _, err := c.Write(append(msg, out...)); err != nil {
			return
		}
	}
}

// answer builds the response to query; ok is false for a packet that is
// not a query this server can answer at all (no header), which is dropped.
func (s *Server) answer(query []byte, udp bool) (out []byte, ok bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil, false
	}
	resp := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired}
	q, err := p.Question()
	if err != nil || h.OpCode != 0 {
		resp.RCode = dnsmessage.RCodeFormatError
		if h.OpCode != 0 {
			resp.RCode = dnsmessage.RCodeNotImplemented
		}
		return headerOnly(resp), true
	}
	limit := 512
	p.SkipAllQuestions()
	p.SkipAllAnswers()
	p.SkipAllAuthorities()
	for {
		rh, err := p.AdditionalHeader()
		if err != nil {
			break
		}
		if rh.Type == dnsmessage.TypeOPT {
			limit = min(max(int(rh.Class), 512), maxUDPSize)
		}
		p.SkipAdditional()
	}
	answers, rcode := s.lookup(q)
	resp.RCode = rcode
	build := func(n int) ([]byte, error) {
		b := dnsmessage.NewBuilder(make([]byte, 0, 512), resp)
		b.EnableCompression()
		if err := b.StartQuestions(); err != nil {
			return nil, err
		}
		if err := b.Question(q); err != nil {
			return nil, err
		}
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		for _, a := range answers[:n] {
			if err := a(&b); err != nil {
				return nil, err
			}
		}
		return b.Finish()
	}
	out, err = build(len(answers))
	if err != nil {
		resp.RCode = dnsmessage.RCodeServerFailure
		return headerOnly(resp), true
	}
	if !udp || len(out) <= limit {
		return out, true
	}
	// Too big for the client's buffer: as many whole records as fit, and
	// the TC bit so that the client asks again over TCP.
	resp.Truncated = true
	for n := len(answers) - 1; n >= 0; n-- {
		if out, err = build(n); err == nil && len(out) <= limit {
			return out, true
		}
	}
	return out, true
}

// lookup returns the answer records for q (each a function adding it to a
// builder) and the response code.
func (s *Server) lookup(q dnsmessage.Question) ([]func(*dnsmessage.Builder) error, dnsmessage.RCode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []func(*dnsmessage.Builder) error
	name := q.Name
	for range 8 {
		r, ok := s.records[strings.ToLower(name.String())]
		if !ok {
			if len(out) > 0 {
				// A dangling CNAME: the alias is the answer.
				return out, dnsmessage.RCodeSuccess
			}
			return nil, dnsmessage.RCodeNameError
		}
		if r.rcode != dnsmessage.RCodeSuccess {
			return nil, r.rcode
		}
		hdr := dnsmessage.ResourceHeader{Name: name, Class: dnsmessage.ClassINET, TTL: r.ttl}
		if r.cname.Length > 0 {
			body := dnsmessage.CNAMEResource{CNAME: r.cname}
			h := hdr
			out = append(out, func(b *dnsmessage.Builder) error { return b.CNAMEResource(h, body) })
			if q.Type == dnsmessage.TypeCNAME {
				return out, dnsmessage.RCodeSuccess
			}
			name = r.cname
			continue
		}
		for _, a := range r.addrs {
			h := hdr
			switch {
			case a.Is4() && (q.Type == dnsmessage.TypeA || q.Type == dnsmessage.TypeALL):
				body := dnsmessage.AResource{A: a.As4()}
				out = append(out, func(b *dnsmessage.Builder) error { return b.AResource(h, body) })
			case a.Is6() && (q.Type == dnsmessage.TypeAAAA || q.Type == dnsmessage.TypeALL):
				body := dnsmessage.AAAAResource{AAAA: a.As16()}
				out = append(out, func(b *dnsmessage.Builder) error { return b.AAAAResource(h, body) })
			}
		}
		return out, dnsmessage.RCodeSuccess
	}
	// A loop or a chain longer than this server follows.
	return nil, dnsmessage.RCodeServerFailure
}

// headerOnly is a response with no records: the errors'.
func headerOnly(h dnsmessage.Header) []byte {
	b := dnsmessage.NewBuilder(nil, h)
	out, _ := b.Finish()
	return out
}
