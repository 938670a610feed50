package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the throwaway certificate authority of one test control plane: it
// signs the apiserver's serving certificate and the admin's client
// certificate, and the apiserver trusts it for client-certificate authn.
type pki struct {
	caCert    *x509.Certificate
	caKey     *ecdsa.PrivateKey
	caPEM     []byte
	adminCert []byte // PEM, CN=egret-test-admin O=system:masters
	adminKey  []byte // PEM

	caFile, servingCertFile, servingKeyFile string
	saPubFile, saKeyFile                    string
}

// newPKI writes a CA, a serving pair for 127.0.0.1/localhost, an admin
// client pair and a service-account signing key pair into dir.
func newPKI(dir string) (*pki, error) {
	p := &pki{
		caFile:          filepath.Join(dir, "ca.crt"),
		servingCertFile: filepath.Join(dir, "apiserver.crt"),
		servingKeyFile:  filepath.Join(dir, "apiserver.key"),
		saPubFile:       filepath.Join(dir, "sa.pub"),
		saKeyFile:       filepath.Join(dir, "sa.key"),
	}
	var err error
	p.caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the test CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "egret-kubetest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		return nil, fmt.Errorf("signing the test CA: %w", err)
	}
	if p.caCert, err = x509.ParseCertificate(der); err != nil {
		return nil, fmt.Errorf("parsing the test CA: %w", err)
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(p.caFile, p.caPEM, 0o600); err != nil {
		return nil, err
	}

	servingCert, servingKey, err := p.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.servingCertFile, servingCert, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.servingKeyFile, servingKey, 0o600); err != nil {
		return nil, err
	}

	p.adminCert, p.adminKey, err = p.ClientCert(AdminUser, "system:masters")
	if err != nil {
		return nil, err
	}

	// The apiserver refuses to start without a service-account signing key.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generating the service-account key: %w", err)
	}
	saKeyDER, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saKeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: saKeyDER}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saPubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// ClientCert issues a client certificate (PEM cert, PEM key) for user with
// the given groups; the apiserver maps CN to the user and O to groups.
func (p *pki) ClientCert(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	return p.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (p *pki) issue(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating a key for %q: %w", tmpl.Subject.CommonName, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing a certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
