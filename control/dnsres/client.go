// Package dnsres resolves the DNS names of EgressIPTraffic objects for the
// controller: every A and AAAA address of a name with the TTL of its
// answer, kept between a floor and a ceiling, resolved again when it
// expires. A failed resolution keeps the last good addresses and records
// the error: an empty or partial answer is never applied.
//
// Go's net.Resolver hides TTLs, so Client speaks DNS itself
// (golang.org/x/net/dns/dnsmessage): UDP to the servers of
// /etc/resolv.conf, TCP when an answer is truncated.
package dnsres

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// DefaultQueryTimeout bounds one query to one server, as resolv.conf's
// default "timeout:5".
const DefaultQueryTimeout = 5 * time.Second

// maxCNAMEs bounds a CNAME chain, so a loop ends in an error.
const maxCNAMEs = 8

// Answer is what a name resolved to.
type Answer struct {
	// Addrs are every A and AAAA address at the end of the name's CNAME
	// chain, sorted, never empty.
	Addrs []netip.Addr
	// TTL is the smallest TTL of the records that gave Addrs (the CNAMEs
	// included): after it, any of them may have changed.
	TTL time.Duration
}

// ErrNotFound is a name that does not exist (NXDOMAIN) or has no A nor
// AAAA record.
var ErrNotFound = errors.New("no such name")

// Client queries DNS servers directly, so that answers keep their TTLs.
type Client struct {
	servers []netip.AddrPort
	timeout time.Duration
}

// NewClient queries servers in order, each for at most timeout (0: the
// default), until one answers.
func NewClient(servers []netip.AddrPort, timeout time.Duration) (*Client, error) {
	if len(servers) == 0 {
		return nil, errors.New("no DNS server to query")
	}
	if timeout <= 0 {
		timeout = DefaultQueryTimeout
	}
	return &Client{servers: slices.Clone(servers), timeout: timeout}, nil
}

// ResolvConfServers reads the nameserver lines of a resolv.conf file
// (/etc/resolv.conf), in order, on port 53. A file without any gives
// 127.0.0.1:53 and [::1]:53, as the C library does.
func ResolvConfServers(path string) ([]netip.AddrPort, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the DNS servers: %w", err)
	}
	defer f.Close()
	var out []netip.AddrPort
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		// A zone (fe80::1%eth0) is kept: link-local servers need it.
		a, err := netip.ParseAddr(fields[1])
		if err != nil {
			continue // the C library skips what it cannot parse, too
		}
		out = append(out, netip.AddrPortFrom(a, 53))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the DNS servers of %s: %w", path, err)
	}
	if len(out) == 0 {
		out = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:53"), netip.MustParseAddrPort("[::1]:53")}
	}
	return out, nil
}

// ParseServer reads a DNS server given as an address, with or without a
// port ("192.0.2.53", "192.0.2.53:5353", "[2001:db8::53]:53").
func ParseServer(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("DNS server %q is not an IP address with an optional port, such as 192.0.2.53 or [2001:db8::53]:53", s)
	}
	return netip.AddrPortFrom(a, 53), nil
}

// Lookup resolves name (a fully qualified name, with or without the final
// dot) to all its A and AAAA addresses. The first server that answers,
// with an answer or NXDOMAIN, decides; a server that fails (no answer,
// SERVFAIL, REFUSED, a malformed message) passes to the next.
func (c *Client) Lookup(ctx context.Context, name string) (Answer, error) {
	fqdn := strings.ToLower(strings.TrimSuffix(name, ".")) + "."
	var errs []error
	for _, srv := range c.servers {
		a, err := c.lookupAt(ctx, srv, fqdn)
		if err == nil || errors.Is(err, ErrNotFound) {
			return a, err
		}
		if ctx.Err() != nil {
			return Answer{}, ctx.Err()
		}
		errs = append(errs, fmt.Errorf("server %s: %w", srv, err))
	}
	return Answer{}, errors.Join(errs...)
}

// lookupAt resolves fqdn at one server: A then AAAA, each following the
// CNAME chain.
func (c *Client) lookupAt(ctx context.Context, srv netip.AddrPort, fqdn string) (Answer, error) {
	var out Answer
	for _, t := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
		addrs, ttl, err := c.chase(ctx, srv, fqdn, t)
		if err != nil {
			return Answer{}, err
		}
		if len(addrs) > 0 && (len(out.Addrs) == 0 || ttl < out.TTL) {
			out.TTL = ttl
		}
		out.Addrs = append(out.Addrs, addrs...)
	}
	if len(out.Addrs) == 0 {
		return Answer{}, fmt.Errorf("%s has no A nor AAAA record: %w", strings.TrimSuffix(fqdn, "."), ErrNotFound)
	}
	slices.SortFunc(out.Addrs, netip.Addr.Compare)
	out.Addrs = slices.Compact(out.Addrs)
	return out, nil
}

// chase asks for records of type t of fqdn, and follows CNAMEs the server
// did not resolve itself with further queries.
func (c *Client) chase(ctx context.Context, srv netip.AddrPort, fqdn string, t dnsmessage.Type) ([]netip.Addr, time.Duration, error) {
	ch := chain{fqdn: fqdn, target: fqdn, t: t, minTTL: -1}
	for {
		msg, err := c.exchange(ctx, srv, ch.target, t)
		if err != nil {
			return nil, 0, err
		}
		done, err := ch.read(msg)
		if err != nil {
			return nil, 0, err
		}
		if done {
			return ch.addrs, max(ch.minTTL, 0), nil
		}
	}
}

// chain follows one name's CNAMEs and collects its addresses of one type
// over the answers it takes to (the parsing half of chase, without I/O).
type chain struct {
	fqdn   string          // the name asked for, lower case, final dot
	target string          // the name the chain has reached
	t      dnsmessage.Type // A or AAAA
	hops   int             // CNAMEs followed
	minTTL time.Duration   // smallest TTL of the records used; -1: none yet
	addrs  []netip.Addr
}

// read takes the answer to a question about c.target. done: the chain
// ended (addresses, or a final name without records of the type); not
// done: c.target is a name the answer said nothing of, to be asked next.
func (c *chain) read(msg *dnsmessage.Message) (done bool, err error) {
	name := strings.TrimSuffix(c.fqdn, ".")
	if msg.Header.RCode == dnsmessage.RCodeNameError {
		if c.target == c.fqdn {
			return true, fmt.Errorf("%s: %w (NXDOMAIN)", name, ErrNotFound)
		}
		return true, fmt.Errorf("%s is an alias of %s, which does not exist: %w (NXDOMAIN)", name, strings.TrimSuffix(c.target, "."), ErrNotFound)
	}
	if msg.Header.RCode != dnsmessage.RCodeSuccess {
		return true, fmt.Errorf("answer %s to %s %s", strings.TrimPrefix(msg.Header.RCode.String(), "RCode"),
			strings.TrimSuffix(c.target, "."), strings.TrimPrefix(c.t.String(), "Type"))
	}
	keep := func(ttl uint32) {
		if d := time.Duration(ttl) * time.Second; c.minTTL < 0 || d < c.minTTL {
			c.minTTL = d
		}
	}
	asked := c.target
	// Walk the answer from target: CNAMEs move it, addresses of the final
	// name count; records about other names are ignored (a server cannot
	// vouch for names it was not asked about).
	for moved := true; moved; {
		moved = false
		for _, rr := range msg.Answers {
			if !strings.EqualFold(rr.Header.Name.String(), c.target) {
				continue
			}
			if cn, ok := rr.Body.(*dnsmessage.CNAMEResource); ok {
				if c.hops++; c.hops > maxCNAMEs {
					return true, fmt.Errorf("%s: more than %d CNAMEs (a loop?)", name, maxCNAMEs)
				}
				keep(rr.Header.TTL)
				c.target = strings.ToLower(cn.CNAME.String())
				moved = true
				break
			}
		}
	}
	said := false // the answer has a record about the final name
	for _, rr := range msg.Answers {
		if !strings.EqualFold(rr.Header.Name.String(), c.target) {
			continue
		}
		said = true
		switch b := rr.Body.(type) {
		case *dnsmessage.AResource:
			if c.t == dnsmessage.TypeA {
				c.addrs = append(c.addrs, netip.AddrFrom4(b.A))
				keep(rr.Header.TTL)
			}
		case *dnsmessage.AAAAResource:
			if c.t == dnsmessage.TypeAAAA {
				c.addrs = append(c.addrs, netip.AddrFrom16(b.AAAA))
				keep(rr.Header.TTL)
			}
		}
	}
	// A server that answered the final name itself with no records of
	// the type (NODATA) has given its answer; one that stopped at a CNAME
	// whose target it said nothing of leaves that name to be asked.
	return len(c.addrs) > 0 || said || c.target == asked, nil
}

// exchange sends one query over UDP, and again over TCP if the answer is
// truncated.
func (c *Client) exchange(ctx context.Context, srv netip.AddrPort, name string, t dnsmessage.Type) (*dnsmessage.Message, error) {
	qname, err := dnsmessage.NewName(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not a DNS name: %w", name, err)
	}
	id := uint16(rand.Uint32())
	q := dnsmessage.Question{Name: qname, Type: t, Class: dnsmessage.ClassINET}
	query := dnsmessage.Message{Header: dnsmessage.Header{ID: id, RecursionDesired: true}, Questions: []dnsmessage.Question{q}}
	packed, err := query.Pack()
	if err != nil {
		return nil, fmt.Errorf("packing the query for %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	msg, err := exchangeUDP(ctx, srv, packed, id, q)
	if err != nil {
		return nil, err
	}
	if msg.Header.Truncated {
		return exchangeTCP(ctx, srv, packed, id, q)
	}
	return msg, nil
}

// exchangeUDP sends packed and waits for the answer with id to q; other
// datagrams (late answers, spoofing attempts) are skipped.
func exchangeUDP(ctx context.Context, srv netip.AddrPort, packed []byte, id uint16, q dnsmessage.Question) (*dnsmessage.Message, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", srv.String())
	if err != nil {
		return nil, ioError(ctx, "sending the query", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(packed); err != nil {
		return nil, ioError(ctx, "sending the query", err)
	}
	buf := make([]byte, 65535)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, ioError(ctx, "reading the answer", err)
		}
		if msg, ok := parseAnswer(buf[:n], id, q); ok {
			return msg, nil
		}
	}
}

// exchangeTCP sends packed over TCP (RFC 1035 4.2.2: two length bytes).
func exchangeTCP(ctx context.Context, srv netip.AddrPort, packed []byte, id uint16, q dnsmessage.Question) (*dnsmessage.Message, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", srv.String())
	if err != nil {
		return nil, ioError(ctx, "connecting over TCP for a truncated answer", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	out := binary.BigEndian.AppendUint16(nil, uint16(len(packed)))
	if _, err := conn.Write(append(out, packed...)); err != nil {
		return nil, ioError(ctx, "sending the query over TCP", err)
	}
	var l [2]byte
	if _, err := io.ReadFull(conn, l[:]); err != nil {
		return nil, ioError(ctx, "reading the TCP answer", err)
	}
	buf := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(conn, buf); err != nil {
		return nil, ioError(ctx, "reading the TCP answer", err)
	}
	msg, ok := parseAnswer(buf, id, q)
	if !ok {
		return nil, errors.New("malformed TCP answer, or one to another question")
	}
	return msg, nil
}

// parseAnswer parses b if it is an answer to q with id.
func parseAnswer(b []byte, id uint16, q dnsmessage.Question) (*dnsmessage.Message, bool) {
	var m dnsmessage.Message
	if err := m.Unpack(b); err != nil {
		return nil, false
	}
	if !m.Header.Response || m.Header.ID != id || len(m.Questions) != 1 ||
		m.Questions[0].Type != q.Type || m.Questions[0].Class != q.Class ||
		!strings.EqualFold(m.Questions[0].Name.String(), q.Name.String()) {
		return nil, false
	}
	return &m, true
}

// ioError says what failed in words that do not change from one attempt
// to the next: a socket error names ephemeral ports, and the controller
// reports a name's error again (status, Event) only when its text changes.
func ioError(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: no answer in time", what)
	}
	if errno, ok := errors.AsType[syscall.Errno](err); ok {
		return fmt.Errorf("%s: %w", what, errno)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%s: the server closed the connection", what)
	}
	return fmt.Errorf("%s failed", what)
}
