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

// serverTLS runs the listener's side of the TLS handshake on c by deadline
// and returns the TLS connection, the node its verified client certificate
// was issued to, and the key of the sync handshake.
func (s *Sync) serverTLS(c net.Conn, deadline time.Time) (*tls.Conn, string, []byte, error) {
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
	key, err := cs.ExportKeyingMaterial(exporterLabel, nil, MinKeyLen)
	if err != nil {
		return nil, "", nil, &tlsError{err}
	}
	return tc, node, key, nil
}

// accepted authenticates the connection c the listener accepted, within
// pendingFor: the sync handshake proves the key, which in the TLS mode is
// the TLS session's exported keying material, and the name the peer gives
// in it must then be its certificate's.
func (s *Sync) accepted(c net.Conn) (*session, error) {
	deadline := time.Now().Add(pendingFor)
	key, node := s.cfg.Key, ""
	if s.cfg.TLS != nil {
		tc, n, k, err := s.serverTLS(c, deadline)
		if err != nil {
			return nil, err
		}
		c, node, key = tc, n, k
	}
	sess, err := serverHandshake(c, key, time.Until(deadline), syncVersions)
	if err != nil {
		return nil, err
	}
	if s.cfg.TLS != nil && sess.peer != node {
		return nil, &identityError{fmt.Sprintf("the peer names itself %q; its certificate is node %q's", sess.peer, node)}
	}
	return sess, nil
}

// open runs the sending side's handshakes on c, the connection to the
// standby at l.addr.
func (l *link) open(c net.Conn) (*session, error) {
	if l.s.cfg.TLS == nil {
		return clientHandshake(c, l.s.cfg.Key, l.s.cfg.Node, syncVersions)
	}
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
