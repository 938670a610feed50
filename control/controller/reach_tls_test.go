package controller

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/health"
)

// testCA is a throwaway CA that issues PEM files into dir.
type testCA struct {
	t    *testing.T
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA certificate's PEM file
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	ca := &testCA{t: t, dir: t.TempDir()}
	ca.cert, ca.key, ca.file = ca.issue(name, nil, nil)
	return ca
}

// issue makes a certificate for cn (with DNS names dns), signed by ca, or
// self-signed as a CA when ca.cert is nil; it returns the certificate, its
// key and the path of its PEM file (the key is beside it, .key).
func (ca *testCA) issue(cn string, dns []string, usage []x509.ExtKeyUsage) (*x509.Certificate, *ecdsa.PrivateKey, string) {
	t := ca.t
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		DNSNames: dns, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage}
	parent, signer := tmpl, key
	if ca.cert == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
	} else {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(ca.dir, cn+".crt")
	write := func(p, typ string, b []byte) {
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(path, "CERTIFICATE", der)
	write(strings.TrimSuffix(path, ".crt")+".key", "EC PRIVATE KEY", kder)
	return cert, key, path
}

// pair issues a certificate and returns its PEM and key files.
func (ca *testCA) pair(cn string, dns []string, usage x509.ExtKeyUsage) (crt, key string) {
	_, _, crt = ca.issue(cn, dns, []x509.ExtKeyUsage{usage})
	return crt, strings.TrimSuffix(crt, ".crt") + ".key"
}

// TestProbeMutualTLS runs the controller's reachability probe against a real
// gateway health server that requires mutual TLS: the probe succeeds with
// the right files, fails when the controller trusts another CA or expects
// another name, and the server refuses clients without the right certificate.
func TestProbeMutualTLS(t *testing.T) {
	ca := newTestCA(t, "egret-probe-ca")
	gwCrt, gwKey := ca.pair("gateway", []string{health.DefaultServerName}, x509.ExtKeyUsageServerAuth)
	ctlCrt, ctlKey := ca.pair("controller", nil, x509.ExtKeyUsageClientAuth)
	other := newTestCA(t, "another-ca")
	strangerCrt, strangerKey := other.pair("stranger", nil, x509.ExtKeyUsageClientAuth)

	stc, err := health.ServerTLS(health.TLSFiles{Cert: gwCrt, Key: gwKey, CA: ca.file})
	if err != nil {
		t.Fatal(err)
	}
	s, err := health.Listen("127.0.0.1:0", health.TLS(stc))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	target := s.Addr().String()

	probe := func(pt ProbeTLS) error {
		t.Helper()
		r, err := newReachability(time.Second, time.Second, pt, slog.Default(), func() {})
		if err != nil {
			t.Fatalf("newReachability: %v", err)
		}
		defer r.prober.Close()
		return r.prober.Probe(context.Background(), target, time.Second, nil)
	}
	good := ProbeTLS{CertFile: ctlCrt, KeyFile: ctlKey, CAFile: ca.file}
	if err := probe(good); err != nil {
		t.Errorf("probe with the controller's certificate: %v", err)
	}
	wrongCA := good
	wrongCA.CAFile = other.file
	if err := probe(wrongCA); err == nil {
		t.Error("probe that trusts another CA succeeded")
	}
	wrongName := good
	wrongName.ServerName = "not-the-gateway"
	if err := probe(wrongName); err == nil {
		t.Error("probe expecting another server name succeeded")
	}
	// The gateway refuses clients: one whose certificate another CA
	// signed, one with no certificate, and plain gRPC.
	if err := probe(ProbeTLS{CertFile: strangerCrt, KeyFile: strangerKey, CAFile: ca.file}); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	noCert := health.NewProber(health.ProbeTLS(&tls.Config{RootCAs: pool, ServerName: health.DefaultServerName, MinVersion: tls.VersionTLS13}))
	defer noCert.Close()
	if err := noCert.Probe(context.Background(), target, time.Second, nil); err == nil {
		t.Error("a client without a certificate was accepted")
	}
	if err := probe(ProbeTLS{}); err == nil {
		t.Error("plain gRPC was accepted by a TLS health server")
	}

	// Files that do not load stop the controller at start.
	if _, err := newReachability(time.Second, time.Second, ProbeTLS{CertFile: ctlCrt, KeyFile: ctlKey, CAFile: "/nonexistent/ca.crt"}, slog.Default(), func() {}); err == nil || !strings.Contains(err.Error(), "/nonexistent/ca.crt") {
		t.Errorf("a missing CA file: %v, want an error naming it", err)
	}
	if err := (Config{HealthTLS: ProbeTLS{CertFile: ctlCrt}}).Validate(); err == nil || !strings.Contains(err.Error(), "healthTLS") {
		t.Errorf("a certificate without key and CA validated: %v", err)
	}
}
