// Package identity gives every gateway node its own X.509 certificate,
// issued by the cluster through a CertificateSigningRequest that the Egret
// controller approves and signs (signerName egret.io/gateway), and gives the
// controller a client certificate from the same CA. Flow sync and the
// reachability probe then use mutual TLS bound to node names instead of a
// shared key. docs/identity.md explains issuance, approval and renewal.
package identity

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// SignerName is the spec.signerName of the gateways' CSRs.
const SignerName = "egret.io/gateway"

// Organisations of the two kinds of certificate the CA issues: a gateway's
// (CN = its node) and a controller's.
const (
	GatewayOrg    = "egret:gateways"
	ControllerOrg = "egret:controllers"
)

// ControllerCN is the common name of a controller's certificate.
const ControllerCN = "egret-controller"

// CAName names both the Secret that holds the CA's key (controller only)
// and the ConfigMap that publishes its certificate (key ca.crt).
const CAName = "egret-identity-ca"

// DefaultCertDuration is the life of a gateway's and a controller's
// certificate unless configured otherwise.
const DefaultCertDuration = 24 * time.Hour

// ErrNotReady is returned by a handshake before the Store holds a
// certificate and its CA.
var ErrNotReady = errors.New("no node certificate yet: the CertificateSigningRequest is not issued")

// GatewayNode returns the node a gateway certificate was issued to. The
// chain must already be verified against the CA: this only reads the
// subject the signer checked.
func GatewayNode(leaf *x509.Certificate) (string, error) {
	if leaf == nil {
		return "", errors.New("no certificate")
	}
	s := leaf.Subject
	if !slices.Equal(s.Organization, []string{GatewayOrg}) {
		return "", fmt.Errorf("certificate %q is not a gateway's (organisation %q, want %q)", s.CommonName, s.Organization, GatewayOrg)
	}
	if s.CommonName == "" || !slices.Equal(leaf.DNSNames, []string{s.CommonName}) {
		return "", fmt.Errorf("gateway certificate %q does not name its node exactly once (DNS names %q)", s.CommonName, leaf.DNSNames)
	}
	return s.CommonName, nil
}

// Controller returns nil if leaf (chain already verified) is a controller's
// client certificate.
func Controller(leaf *x509.Certificate) error {
	if leaf == nil {
		return errors.New("no certificate")
	}
	s := leaf.Subject
	if !slices.Equal(s.Organization, []string{ControllerOrg}) || s.CommonName != ControllerCN {
		return fmt.Errorf("certificate %q (organisation %q) is not the controller's (%q, organisation %q)", s.CommonName, s.Organization, ControllerCN, ControllerOrg)
	}
	return nil
}

// Store holds this process's current certificate and the CA it trusts; it
// is safe for concurrent use. TLS configs built from it take the current
// certificate and CA at each handshake, so renewals never restart a
// listener.
type Store struct {
	mu      sync.Mutex
	cert    *tls.Certificate
	ca      *x509.CertPool
	caPEM   []byte
	ready   chan struct{}
	changed chan struct{} // closed and replaced at each new certificate or CA
}

func newStore() *Store {
	return &Store{ready: make(chan struct{}), changed: make(chan struct{})}
}

// Ready is closed once a first certificate (and the CA) is held.
func (s *Store) Ready() <-chan struct{} { return s.ready }

// NotAfter is the expiry of the current certificate (zero before Ready).
func (s *Store) NotAfter() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cert == nil {
		return time.Time{}
	}
	return s.cert.Leaf.NotAfter
}

// current returns the certificate and CA, or ErrNotReady.
func (s *Store) current() (*tls.Certificate, *x509.CertPool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cert == nil || s.ca == nil {
		return nil, nil, ErrNotReady
	}
	return s.cert, s.ca, nil
}

// caPool is the CA held, nil before the first.
func (s *Store) caPool() *x509.CertPool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ca
}

// setCert installs a new certificate; cert.Leaf must be set.
func (s *Store) setCert(cert *tls.Certificate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cert = cert
	s.notifyLocked()
}

// setCA installs the CA bundle caPEM (already parsed into pool); it
// reports whether it differs from the one held.
func (s *Store) setCA(caPEM []byte, pool *x509.CertPool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Equal(caPEM, s.caPEM) {
		return false
	}
	s.ca, s.caPEM = pool, caPEM
	s.notifyLocked()
	return true
}

func (s *Store) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
	if s.cert != nil && s.ca != nil {
		select {
		case <-s.ready:
		default:
			close(s.ready)
		}
	}
}

// watch returns a channel closed at the next change of certificate or CA.
func (s *Store) watch() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// verifiesAgainstCA reports whether the current certificate chains to the
// current CA (false when either is missing): after the CA is replaced a
// certificate of the old one is useless and is renewed at once.
func (s *Store) verifiesAgainstCA() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cert == nil || s.ca == nil {
		return false
	}
	_, err := s.cert.Leaf.Verify(x509.VerifyOptions{Roots: s.ca, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err == nil
}

// ServerTLS is a TLS 1.3 server config that presents the current
// certificate, requires a client certificate that chains to the current CA
// (client auth) and then calls verify on it. The per-handshake config comes
// from GetConfigForClient so that crypto/tls itself verifies the chain and
// ConnectionState.VerifiedChains is set (control/health reads it).
func (s *Store) ServerTLS(verify func(leaf *x509.Certificate) error) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, ca, err := s.current()
			if err != nil {
				return nil, err
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    ca,
				ClientAuth:   tls.RequireAndVerifyClientCert,
				VerifyConnection: func(cs tls.ConnectionState) error {
					if len(cs.PeerCertificates) == 0 {
						return errors.New("the client presented no certificate")
					}
					return verify(cs.PeerCertificates[0])
				},
			}, nil
		},
	}
}

// ClientTLS is a TLS 1.3 client config that presents the current
// certificate, verifies the server's chain against the current CA (server
// auth) and then calls verify with the leaf and the connection's server
// name (cs.ServerName). It replaces crypto/tls's host name check. Beware:
// crypto/tls keeps no server name for an IP literal, so a caller that dials
// an IP and wants verify to know who is expected sets Config.ServerName (or
// the gRPC authority) to that node's name; otherwise serverName is "" and
// the caller checks the address itself after the handshake.
func (s *Store) ClientTLS(verify func(leaf *x509.Certificate, serverName string) error) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _, err := s.current()
			if err != nil {
				return nil, err
			}
			return cert, nil
		},
		// The chain is verified below against the CA of the moment, not a
		// fixed RootCAs, so crypto/tls's own check is off.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, ca, err := s.current()
			if err != nil {
				return err
			}
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			leaf := cs.PeerCertificates[0]
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("server certificate %q: %w", leaf.Subject.CommonName, err)
			}
			return verify(leaf, cs.ServerName)
		},
	}
}
