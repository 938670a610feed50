package lab

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"
)

// Probe kinds: what the demo and the tests send from a pod.
const (
	ProbeHTTP = "http"
	ProbeUDP  = "udp"
	ProbePing = "ping"
)

// ProbeKinds lists the probes in the order the demo runs them.
var ProbeKinds = []string{ProbeHTTP, ProbeUDP, ProbePing}

// IPv6 probes: the same, to the server's IPv6 address (dual-stack pods).
const (
	ProbeHTTP6 = "http6"
	ProbeUDP6  = "udp6"
	ProbePing6 = "ping6"
)

// ProbeKinds6 lists the IPv6 probes in the order the demo runs them.
var ProbeKinds6 = []string{ProbeHTTP6, ProbeUDP6, ProbePing6}

// ProbeSource sends one probe of kind from namespace ns (a pod) to the
// echo server on a new connection and returns the source address the
// server saw.
func (s *Spec) ProbeSource(ns, kind string, timeout time.Duration) (netip.Addr, error) {
	switch kind {
	case ProbeHTTP:
		ap, err := HTTPSource(ns, netip.AddrPortFrom(s.Server.IP, HTTPPort).String(), timeout)
		return ap.Addr(), err
	case ProbeUDP:
		ap, err := UDPSource(ns, netip.AddrPortFrom(s.Server.IP, UDPPort).String(), timeout)
		return ap.Addr(), err
	case ProbePing:
		return s.PingSource(ns, timeout)
	case ProbeHTTP6, ProbeUDP6, ProbePing6:
		if !s.Server.IP6.IsValid() {
			return netip.Addr{}, fmt.Errorf("probe %s: the lab's server has no IPv6 address", kind)
		}
	}
	switch kind {
	case ProbeHTTP6:
		ap, err := HTTPSource(ns, netip.AddrPortFrom(s.Server.IP6, HTTPPort).String(), timeout)
		return ap.Addr(), err
	case ProbeUDP6:
		ap, err := UDPSource(ns, netip.AddrPortFrom(s.Server.IP6, UDPPort).String(), timeout)
		return ap.Addr(), err
	case ProbePing6:
		return s.Ping6Source(ns, timeout)
	}
	return netip.Addr{}, fmt.Errorf("unknown probe %q: use http, udp, ping, http6, udp6 or ping6", kind)
}

// HTTPSource makes one GET / on a new TCP connection from namespace ns and
// returns the "<ip>:<port>" the echo server answers with.
func HTTPSource(ns, srv string, timeout time.Duration) (netip.AddrPort, error) {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return DialContext(ctx, ns, network, addr)
		},
	}}
	resp, err := c.Get("http://" + srv + "/")
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("reading the echo answer: %w", err)
	}
	return netip.ParseAddrPort(strings.Fields(line + " ")[0])
}

// KeepAlive is one keep-alive HTTP/1.1 connection from a pod to the echo
// server: every Get asks, on the same TCP connection, which source the
// server sees. It is the long-lived connection of the demo and the tests
// that a failover must not break.
type KeepAlive struct {
	conn net.Conn
	br   *bufio.Reader
}

// DialKeepAlive opens a KeepAlive from namespace ns to srv ("ip:port").
func DialKeepAlive(ns, srv string, timeout time.Duration) (*KeepAlive, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := DialContext(ctx, ns, "tcp", srv)
	if err != nil {
		return nil, err
	}
	return &KeepAlive{conn: c, br: bufio.NewReader(c)}, nil
}

// Get sends GET / on the connection and returns the "<ip>:<port>" the echo
// server answers with. An exchange that takes longer than limit fails, and
// so does every later one: an answer may still be on its way.
func (k *KeepAlive) Get(limit time.Duration) (netip.AddrPort, error) {
	k.conn.SetDeadline(time.Now().Add(limit))
	if _, err := io.WriteString(k.conn, "GET / HTTP/1.1\r\nHost: egret-lab\r\n\r\n"); err != nil {
		return netip.AddrPort{}, err
	}
	return k.read()
}

// read reads the echo server's answer to a request already sent.
func (k *KeepAlive) read() (netip.AddrPort, error) {
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ap, err := netip.ParseAddrPort(strings.Fields(string(body) + " ")[0])
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("the echo server answered %q: %w", body, err)
	}
	return ap, nil
}

// Close closes the connection; a Get under way returns an error.
func (k *KeepAlive) Close() error { return k.conn.Close() }

var pingID atomic.Uint32

// PingSource sends an ICMP echo request from namespace ns to the server,
// waits for the reply in ns and returns the source address the request
// had when it reached the server (seen by a raw socket there).
func (s *Spec) PingSource(ns string, timeout time.Duration) (netip.Addr, error) {
	if s.Server.IP.Is6() {
		return s.ping6(ns, s.Server.IP, timeout)
	}
	srvSeen, err := ListenPacket(s.NS(s.Server.Name), "ip4:icmp", "0.0.0.0")
	if err != nil {
		return netip.Addr{}, fmt.Errorf("ICMP listener on the server: %w", err)
	}
	defer srvSeen.Close()
	pc, err := ListenPacket(ns, "ip4:icmp", "0.0.0.0")
	if err != nil {
		return netip.Addr{}, fmt.Errorf("ICMP socket in %s: %w", ns, err)
	}
	defer pc.Close()
	id := uint16(0x6500 + pingID.Add(1)%0x1000)
	marker := []byte(fmt.Sprintf("egret-probe-%s-%d", ns, id))
	if _, err := pc.WriteTo(echoRequest(id, 1, marker), &net.IPAddr{IP: s.Server.IP.AsSlice()}); err != nil {
		return netip.Addr{}, fmt.Errorf("ICMP send from %s: %w", ns, err)
	}
	deadline := time.Now().Add(timeout)
	if _, ok := readEcho(pc, 0, id, marker, deadline); !ok {
		return netip.Addr{}, fmt.Errorf("no ICMP echo reply within %v", timeout)
	}
	from, ok := readEcho(srvSeen, 8, id, marker, deadline)
	if !ok {
		return netip.Addr{}, errors.New("the reply came back but the server's raw socket saw no request")
	}
	return from, nil
}

// Ping6Source is PingSource over IPv6 (ICMPv6 echo to the server's IPv6
// address).
func (s *Spec) Ping6Source(ns string, timeout time.Duration) (netip.Addr, error) {
	return s.ping6(ns, s.Server.IP6, timeout)
}

// ping6 is PingSource over ICMPv6 to dst. The kernel fills in ICMPv6
// checksums on raw sockets.
func (s *Spec) ping6(ns string, dst netip.Addr, timeout time.Duration) (netip.Addr, error) {
	srvSeen, err := ListenPacket(s.NS(s.Server.Name), "ip6:ipv6-icmp", "::")
	if err != nil {
		return netip.Addr{}, fmt.Errorf("ICMPv6 listener on the server: %w", err)
	}
	defer srvSeen.Close()
	pc, err := ListenPacket(ns, "ip6:ipv6-icmp", "::")
	if err != nil {
		return netip.Addr{}, fmt.Errorf("ICMPv6 socket in %s: %w", ns, err)
	}
	defer pc.Close()
	id := uint16(0x6500 + pingID.Add(1)%0x1000)
	marker := []byte(fmt.Sprintf("egret-probe6-%s-%d", ns, id))
	req := echoRequest(id, 1, marker)
	req[0], req[2], req[3] = 128, 0, 0 // ICMPv6 echo request; checksum by the kernel
	if _, err := pc.WriteTo(req, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return netip.Addr{}, fmt.Errorf("ICMPv6 send from %s: %w", ns, err)
	}
	deadline := time.Now().Add(timeout)
	if _, ok := readEcho(pc, 129, id, marker, deadline); !ok {
		return netip.Addr{}, fmt.Errorf("no ICMPv6 echo reply within %v", timeout)
	}
	from, ok := readEcho(srvSeen, 128, id, marker, deadline)
	if !ok {
		return netip.Addr{}, errors.New("the reply came back but the server's raw socket saw no request")
	}
	return from, nil
}

// readEcho reads until an ICMP message of typ with id and payload arrives
// and returns its source.
func readEcho(pc net.PacketConn, typ byte, id uint16, payload []byte, deadline time.Time) (netip.Addr, bool) {
	pc.SetReadDeadline(deadline)
	buf := make([]byte, 2048)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return netip.Addr{}, false
		}
		m := buf[:n]
		if n >= 8 && m[0] == typ && binary.BigEndian.Uint16(m[4:]) == id && strings.Contains(string(m[8:]), string(payload)) {
			a, _ := netip.AddrFromSlice(from.(*net.IPAddr).IP)
			return a.Unmap(), true
		}
	}
}

// echoRequest builds an ICMPv4 echo request.
func echoRequest(id, seq uint16, payload []byte) []byte {
	b := make([]byte, 8+len(payload))
	b[0] = 8
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	copy(b[8:], payload)
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(b[2:], ^uint16(sum))
	return b
}
