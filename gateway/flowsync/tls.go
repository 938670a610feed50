package flowsync

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// exporterLabel names the keying material (RFC 8446, 7.5) both sides of a
// TLS session export as the key of the sync handshake run inside it: the
// session's AEAD keys are then bound to that TLS session, and the TLS mode
// runs the very handshake and sealing of the key mode.
const exporterLabel = "EXPORTER-egret-flow-sync"

// tlsError is a TLS handshake that failed: no certificate, one of another
// CA, expired, or no TLS at all.
type tlsError struct{ err error }

func (e *tlsError) Error() string { return "TLS handshake: " + e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

// identityError is a TLS peer whose certificate is not that of the gateway
// node it names (receiver) or of a gateway node at the dialed address
// (sender).
type identityError struct{ reason string }

func (e *identityError) Error() string { return e.reason }

// addressError is a TLS peer whose certificate's node the cluster does not
// place at the address it connects from (peer_address).
type addressError struct{ node string }

func (e *addressError) Error() string {
	return fmt.Sprintf("the peer presents node %q's certificate from an address that is not that node's", e.node)
}

// tlsHandshakeRecord is the first byte of a TLS client's first record (its
// ClientHello): the record type handshake (RFC 8446, 5.1).
const tlsHandshakeRecord = 0x16

// serverTLS runs the listener's side of the TLS handshake on c, from src,
// by deadline and returns the TLS connection, the node its verified client
// certificate was issued to, and the key of the sync handshake. The node
// must be at src: checked here, before the sync handshake, a host
// presenting another node's certificate is refused and counted whatever
// it does next.
func (s *Sync) serverTLS(c net.Conn, src netip.Addr, deadline time.Time) (*tls.Conn, string, []byte, error) {
	tc := tls.Server(c, s.cfg.TLS.Server)
	c.SetDeadline(deadline)
	if err := tc.Handshake(); err != nil {
		return nil, "", nil, &tlsError{err}
	}
	cs := tc.ConnectionState()
	// Only a chain the configuration verified names a node: a
	// configuration that merely requests a certificate must not let a
	// self-made one through.
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil, "", nil, &identityError{"the peer's certificate chain was not verified (the listener's TLS configuration must require and verify client certificates)"}
	}
	node, err := s.cfg.TLS.PeerNode(cs.VerifiedChains[0][0])
	if err != nil {
		return nil, "", nil, &identityError{fmt.Sprintf("the peer's certificate is not a gateway node's: %v", err)}
	}
	if adm := s.admission(); adm == nil || !adm.peerAt(node, src) {
		return nil, "", nil, &addressError{node}
	}
	key, err := cs.ExportKeyingMaterial(exporterLabel, nil, MinKeyLen)
	if err != nil {
		return nil, "", nil, &tlsError{err}
	}
	return tc, node, key, nil
}

// sniff tells, in the transition, a TLS client at c from a key-mode one by
// its first byte, waited for sniffFor (at most until deadline): a TLS
// handshake record, or silence (the key-mode client waits to be greeted).
// It returns the connection to go on with (holding the byte it read) and
// whether it is TLS; any other first byte is refused.
func sniff(c net.Conn, deadline time.Time) (net.Conn, bool, error) {
	wait := time.Now().Add(sniffFor)
	if deadline.Before(wait) {
		wait = deadline
	}
	c.SetReadDeadline(wait)
	var b [1]byte
	_, err := c.Read(b[:])
	c.SetReadDeadline(time.Time{})
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return c, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("%w (%v)", ErrRefused, err)
	case b[0] == tlsHandshakeRecord:
		return &prefixConn{Conn: c, pre: b[:]}, true, nil
	}
	return nil, false, fmt.Errorf("%w: the client's first byte is %#02x, neither a TLS handshake nor a key-mode client's silence", errNotSync, b[0])
}

// prefixConn is a connection whose first bytes (pre) were read already:
// Read returns them first.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// accepted authenticates the connection c the listener accepted from src,
// within pendingFor, and reports whether the shared key did it (rather
// than a node certificate): the sync handshake proves the key, which in
// the TLS mode is the TLS session's exported keying material, and the name
// the peer gives in it must then be its certificate's. In the transition
// (Key and TLS) the client's first byte says which mode it speaks.
func (s *Sync) accepted(c net.Conn, src netip.Addr) (*session, bool, error) {
	deadline := time.Now().Add(pendingFor)
	useTLS := s.cfg.TLS != nil
	if useTLS && len(s.cfg.Key) > 0 {
		var err error
		if c, useTLS, err = sniff(c, deadline); err != nil {
			return nil, false, err
		}
	}
	key, node := s.cfg.Key, ""
	if useTLS {
		tc, n, k, err := s.serverTLS(c, src, deadline)
		if err != nil {
			return nil, false, err
		}
		c, node, key = tc, n, k
	}
	sess, err := serverHandshake(c, key, time.Until(deadline), syncVersions)
	if err != nil {
		return nil, false, err
	}
	if useTLS && sess.peer != node {
		return nil, false, &identityError{fmt.Sprintf("the peer names itself %q; its certificate is node %q's", sess.peer, node)}
	}
	return sess, !useTLS, nil
}

// dial opens a TCP connection to the standby at l.addr.
func (l *link) dial() (net.Conn, error) {
	d := net.Dialer{Timeout: retryEvery}
	if src := l.s.cfg.Source; src.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	}
	return d.Dial("tcp", l.addr)
}

// open dials the standby at l.addr and runs the sending side's handshakes:
// the key's, or TLS's and the sync handshake inside it; in the transition
// (Key and TLS), towards a standby that answers TLS with the key mode's
// greeting (a gateway of the previous release), the key's on a new
// connection. It returns the TCP connection under the session and whether
// the shared key authenticated it.
func (l *link) open() (net.Conn, *session, bool, error) {
	c, err := l.dial()
	if err != nil {
		return nil, nil, false, err
	}
	if l.s.cfg.TLS != nil {
		sess, err := l.openTLS(c)
		if err == nil {
			return c, sess, false, nil
		}
		c.Close()
		if len(l.s.cfg.Key) == 0 || !keyOnly(err) {
			return nil, nil, false, err
		}
		if !l.keyOnly {
			l.keyOnly = true
			l.s.cfg.Log.Info("flow sync: the standby speaks only the shared key (previous release?); sending to it with the key", "peer", l.addr)
		}
		if c, err = l.dial(); err != nil {
			return nil, nil, false, err
		}
	}
	sess, err := clientHandshake(c, l.s.cfg.Key, l.s.cfg.Node, syncVersions)
	if err != nil {
		c.Close()
		return nil, nil, false, err
	}
	return c, sess, true, nil
}

// keyOnly reports whether err, of a TLS handshake, is the answer of a
// listener that speaks only the key: its greeting (the sync magic) where
// the server's first TLS record was expected.
func keyOnly(err error) bool {
	var rh tls.RecordHeaderError
	return errors.As(err, &rh) && [4]byte(rh.RecordHeader[:4]) == magic
}

// openTLS runs the TLS handshake and the sync handshake inside it on c,
// the connection to the standby at l.addr.
func (l *link) openTLS(c net.Conn) (*session, error) {
	host, _, err := net.SplitHostPort(l.addr)
	if err != nil {
		return nil, fmt.Errorf("standby address %q: %w", l.addr, err)
	}
	cfg := l.s.cfg.TLS.Client.Clone()
	cfg.ServerName = host
	tc := tls.Client(c, cfg)
	c.SetDeadline(time.Now().Add(handshakeFor))
	if err := tc.Handshake(); err != nil {
		return nil, &tlsError{err}
	}
	cs := tc.ConnectionState()
	key, err := cs.ExportKeyingMaterial(exporterLabel, nil, MinKeyLen)
	if err != nil {
		return nil, &tlsError{err}
	}
	sess, err := clientHandshake(tc, key, l.s.cfg.Node, syncVersions)
	if err != nil {
		// In TLS 1.3 the client's handshake ends before the server has
		// checked its certificate: a refusal arrives as an alert at
		// the first read.
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Op == "remote error" {
			return nil, &tlsError{oe}
		}
		return nil, err
	}
	if err := l.s.standbyAt(cs, host); err != nil {
		return nil, err
	}
	return sess, nil
}

// standbyAt checks that the standby's certificate (cs) was issued to a
// gateway node the cluster places at host, the address dialed: the
// standby's chain being the cluster's is not enough, or any gateway could
// take the flows meant for another by answering at its address.
func (s *Sync) standbyAt(cs tls.ConnectionState, host string) error {
	if len(cs.PeerCertificates) == 0 {
		return &identityError{"the standby presented no certificate"}
	}
	node, err := s.cfg.TLS.PeerNode(cs.PeerCertificates[0])
	if err != nil {
		return &identityError{fmt.Sprintf("the standby's certificate is not a gateway node's: %v", err)}
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return &identityError{fmt.Sprintf("the standby's address %q is not an IP address to check node %q against", host, node)}
	}
	adm := s.admission()
	if adm == nil {
		return &identityError{fmt.Sprintf("no view of the cluster to check that node %q is at %s", node, addr)}
	}
	if !adm.peerAt(node, addr) {
		return &identityError{fmt.Sprintf("the standby at %s presents node %q's certificate, and that node is not at this address", addr, node)}
	}
	return nil
}
