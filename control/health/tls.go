package health

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// DefaultServerName is the name the controller expects in the gateway's
// certificate. The controller dials node IPs, and one Secret serves every
// gateway node, so the certificate names the role, not an address.
const DefaultServerName = "egret-gateway"

// TLSFiles names the PEM files of one side of the mutually authenticated
// health check, as mounted from a Secret (kubernetes.io/tls keys tls.crt and
// tls.key, plus ca.crt).
type TLSFiles struct {
	Cert, Key string // this side's certificate chain and private key
	CA        string // the CA the other side's certificate must chain to
}

// Enabled reports whether any file is named.
func (f TLSFiles) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// Check says which file is missing when some but not all are named.
func (f TLSFiles) Check() error {
	if !f.Enabled() || (f.Cert != "" && f.Key != "" && f.CA != "") {
		return nil
	}
	return errors.New("mutual TLS needs all three of a certificate, its key and the peer's CA; give all or none")
}

func (f TLSFiles) load() (tls.Certificate, *x509.CertPool, error) {
	if err := f.Check(); err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("loading the certificate %s and key %s: %w", f.Cert, f.Key, err)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("reading the CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tls.Certificate{}, nil, fmt.Errorf("%s holds no PEM certificate", f.CA)
	}
	return cert, pool, nil
}

// ServerTLS is the gateway's side: it presents its certificate and accepts
// only clients whose certificate chains to f.CA (the controller's).
func ServerTLS(f TLSFiles) (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, fmt.Errorf("health service TLS: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}, nil
}

// ClientTLS is the controller's side: it presents its client certificate and
// accepts only a gateway certificate for serverName that chains to f.CA.
func ClientTLS(f TLSFiles, serverName string) (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, fmt.Errorf("reachability probe TLS: %w", err)
	}
	if serverName == "" {
		serverName = DefaultServerName
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: serverName,
		MinVersion: tls.VersionTLS13}, nil
}
