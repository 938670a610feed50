package health

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/netip"
	"testing"
	"time"
)

// testPKI is a CA with one server and one client certificate, in memory.
type testPKI struct {
	server, client *tls.Config
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	mk := func(cn string, parent *x509.Certificate, pkey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) (*x509.Certificate, tls.Certificate, *ecdsa.PrivateKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
			DNSNames: []string{cn}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		if parent == nil {
			tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage, tmpl.ExtKeyUsage = true, true, x509.KeyUsageCertSign, nil
			parent, pkey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, pkey)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: c}, key
	}
	ca, _, caKey := mk("test-ca", nil, nil, 0)
	_, srv, _ := mk(DefaultServerName, ca, caKey, x509.ExtKeyUsageServerAuth)
	_, cli, _ := mk("egret-controller", ca, caKey, x509.ExtKeyUsageClientAuth)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return testPKI{
		server: &tls.Config{Certificates: []tls.Certificate{srv}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13},
		client: &tls.Config{Certificates: []tls.Certificate{cli}, RootCAs: pool, ServerName: DefaultServerName, MinVersion: tls.VersionTLS13},
	}
}

// TestAlsoPlain: a TLS server with AlsoPlain answers a mutual TLS probe,
// whose lease is authenticated, and a plain one (a controller of the
// previous release), whose lease is not; without AlsoPlain the plain
// probe fails as before.
func TestAlsoPlain(t *testing.T) {
	pki := newTestPKI(t)
	lease := func() (Lease, bool) {
		return Lease{For: time.Second, IPs: []netip.Addr{netip.MustParseAddr("192.0.2.10")}}, true
	}
	ctx := context.Background()
	for _, also := range []bool{true, false} {
		opts := []Option{TLS(pki.server)}
		if also {
			opts = append(opts, AlsoPlain())
		}
		s, err := Listen("127.0.0.1:0", opts...)
		if err != nil {
			t.Fatal(err)
		}
		grants := make(chan Grant, 4)
		s.SetLeaseHandler(func(g Grant) { grants <- g })
		target := s.Addr().String()

		tp := NewProber(ProbeTLS(pki.client))
		if err := tp.Probe(ctx, target, 2*time.Second, lease); err != nil {
			t.Fatalf("AlsoPlain %v: mutual TLS probe: %v", also, err)
		}
		if g := <-grants; !g.Authenticated {
			t.Errorf("AlsoPlain %v: a lease over mutual TLS is not authenticated: %+v", also, g)
		}
		tp.Close()

		pp := NewProber()
		err = pp.Probe(ctx, target, time.Second, lease)
		pp.Close()
		switch {
		case also && err != nil:
			t.Errorf("AlsoPlain: plain probe: %v", err)
		case also:
			if g := <-grants; g.Authenticated {
				t.Errorf("AlsoPlain: a plain lease counts as authenticated: %+v", g)
			}
		case err == nil:
			t.Errorf("TLS alone answered a plain probe")
		}
		s.Stop()
	}
}
