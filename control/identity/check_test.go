package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// FuzzCheck: whatever spec.request holds, the rule answers (a refusal for
// anything but a well-formed gateway request) and never panics.
func FuzzCheck(f *testing.F) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "gw1", Organization: []string{GatewayOrg}}, DNSNames: []string{"gw1"}}, key)
	if err != nil {
		f.Fatal(err)
	}
	good := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	f.Add(good)
	f.Add(der)
	f.Add(good[:len(good)/2])
	bad := append([]byte(nil), der...)
	bad[len(bad)-3] ^= 0xff // the signature
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: bad}))
	f.Add(append(append([]byte(nil), good...), good...))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----\n"))

	s, err := NewSigner(SignerConfig{Client: fake.NewClientset(), CA: &CA{}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, request []byte) {
		csr := &certv1.CertificateSigningRequest{Spec: certv1.CertificateSigningRequestSpec{
			SignerName: SignerName, Username: s.username, Request: request, Usages: gatewayUsages,
			Extra: map[string]certv1.ExtraValue{NodeNameExtra: {"gw1"}},
		}}
		req, err := s.check(t.Context(), csr)
		// The fake API has no node gw1: even the well-formed request is
		// refused, at the last step.
		if err == nil || req != nil {
			t.Fatalf("check accepted %q", request)
		}
	})
}

func TestNewRequesterRefuses(t *testing.T) {
	c := fake.NewClientset()
	for _, cfg := range []RequesterConfig{
		{Namespace: "ns", Node: "n"},
		{Client: c, Node: "n"},
		{Client: c, Namespace: "ns"},
		{Client: c, Namespace: "ns", Node: "n", Duration: 5 * time.Minute},
		{Client: c, Namespace: "ns", Node: "n", Duration: -time.Hour},
	} {
		if _, err := NewRequester(cfg); err == nil {
			t.Errorf("NewRequester(%+v) accepted", cfg)
		}
	}
	if _, err := NewRequester(RequesterConfig{Client: c, Namespace: "ns", Node: "n", Duration: MinRequestDuration}); err != nil {
		t.Errorf("the shortest duration the API server takes: %v", err)
	}
}
