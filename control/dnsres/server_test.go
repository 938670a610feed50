package dnsres_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// record is what the test server knows of one name.
type record struct {
	ttl   uint32
	ttl6  uint32 // the AAAA records' TTL, when not 0
	addrs []netip.Addr
	cname string // when set, the name is an alias of cname
	// inline: a CNAME answer carries the target's records too, as a
	// recursive server does; otherwise the client must ask for them.
	inline bool
	// truncate: the UDP answer is empty with TC set; TCP answers in full.
	truncate bool
	rcode    dnsmessage.RCode // non-zero: answer this code
}

// server is a minimal authoritative DNS server on loopback, UDP and TCP on
// one port (lab/dnsserver is the lab's; this one also truncates, aliases
// and fails on demand).
type server struct {
	t   *testing.T
	udp net.PacketConn
	tcp net.Listener

	mu      sync.Mutex
	names   map[string]record // by lower-case FQDN with the final dot
	udpQs   int
	tcpQs   int
	dropAll bool // answer nothing
}

func newServer(t *testing.T) *server {
	t.Helper()
	s := &server{t: t, names: map[string]record{}}
	// UDP and TCP on the same port: take a free UDP port, then its TCP twin.
	for range 20 {
		udp, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tcp, err := net.Listen("tcp", udp.LocalAddr().String())
		if err != nil {
			udp.Close()
			continue
		}
		s.udp, s.tcp = udp, tcp
		break
	}
	if s.udp == nil {
		t.Fatal("no loopback port free for both UDP and TCP")
	}
	var wg sync.WaitGroup
	wg.Go(s.serveUDP)
	wg.Go(s.serveTCP)
	t.Cleanup(func() { s.udp.Close(); s.tcp.Close(); wg.Wait() })
	return s
}

func (s *server) addr() netip.AddrPort {
	return netip.MustParseAddrPort(s.udp.LocalAddr().String())
}

func (s *server) set(name string, r record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names[strings.ToLower(name)+"."] = r
}

func (s *server) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.names, strings.ToLower(name)+".")
}

func (s *server) drop(v bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropAll = v
}

func (s *server) queries() (udp, tcp int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.udpQs, s.tcpQs
}

func (s *server) serveUDP() {
	buf := make([]byte, 512)
	for {
		n, from, err := s.udp.ReadFrom(buf)
		if err != nil {
			return
		}
		if out, ok := s.answer(buf[:n], false); ok {
			s.udp.WriteTo(out, from)
		}
	}
}

func (s *server) serveTCP() {
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var l [2]byte
			if _, err := io.ReadFull(c, l[:]); err != nil {
				return
			}
			q := make([]byte, binary.BigEndian.Uint16(l[:]))
			if _, err := io.ReadFull(c, q); err != nil {
				return
			}
			if out, ok := s.answer(q, true); ok {
				c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...))
			}
		}()
	}
}

// answer builds the response to query q.
func (s *server) answer(q []byte, tcp bool) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil, false
	}
	question, err := p.Question()
	if err != nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if tcp {
		s.tcpQs++
	} else {
		s.udpQs++
	}
	if s.dropAll {
		return nil, false
	}
	resp := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired},
		Questions: []dnsmessage.Question{question},
	}
	name := strings.ToLower(question.Name.String())
	r, ok := s.names[name]
	switch {
	case !ok:
		resp.Header.RCode = dnsmessage.RCodeNameError
	case r.rcode != 0:
		resp.Header.RCode = r.rcode
	case r.truncate && !tcp:
		resp.Header.Truncated = true
	default:
		for hops := 0; ok && hops < 10; hops++ {
			if r.cname != "" {
				target := strings.ToLower(r.cname) + "."
				resp.Answers = append(resp.Answers, dnsmessage.Resource{
					Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeCNAME, Class: dnsmessage.ClassINET, TTL: r.ttl},
					Body:   &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName(target)},
				})
				if !r.inline {
					break
				}
				name = target
				r, ok = s.names[name]
				continue
			}
			for _, a := range r.addrs {
				rh := dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(name), Class: dnsmessage.ClassINET, TTL: r.ttl}
				switch {
				case a.Is4() && question.Type == dnsmessage.TypeA:
					resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AResource{A: a.As4()}})
				case a.Is6() && question.Type == dnsmessage.TypeAAAA:
					if r.ttl6 != 0 {
						rh.TTL = r.ttl6
					}
					resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: rh, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
				}
			}
			break
		}
	}
	out, err := resp.Pack()
	if err != nil {
		s.t.Error(errors.New("test server: " + err.Error()))
		return nil, false
	}
	return out, true
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}
