package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netns"
	certv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/egret-gw/egret/control/identity"
	"github.com/egret-gw/egret/internal/nsenter"
	"github.com/egret-gw/egret/internal/nstest"
)

// checkNodeIdentity (issue 33): each gateway node holds a certificate the
// controller issued to it alone (docs/identity.md), and the certificate
// is what the flow sync trusts:
//   - every gateway has an issued certificate for its own node, and says
//     when it expires;
//   - under the token of gw2's gateway pod (what a compromised gw2 holds), a
//     request for gw2 is issued and one for gw1 is denied;
//   - that valid certificate of gw2, presented to gw1's flow sync from an
//     address that is not gw2's (gw1's own), is refused and counted as
//     peer_address.
func (e *env) checkNodeIdentity() {
	e.t.Helper()
	now := time.Now()
	for _, g := range gateways {
		leaf := e.issuedFor(g)
		if leaf == nil {
			e.t.Errorf("node identity: no certificate issued for %s (kubectl get csr):\n%s", g, e.kubectl("get", "csr"))
			continue
		}
		exp := e.gatewayMetric(g, "egret_gateway_node_certificate_expiry_timestamp_seconds")
		if exp < float64(now.Unix()) {
			e.t.Errorf("node identity: the gateway on %s says its certificate expires at %v (before now)", g, exp)
		}
		e.t.Logf("node identity: %s holds a certificate for %s until %s", g, leaf.Subject.CommonName, time.Unix(int64(exp), 0).UTC().Format(time.RFC3339))
	}

	victim, thief := gateways[0], gateways[1]
	tok := strings.TrimSpace(e.kubectl("-n", "egret-system", "create", "token", "egret-gateway",
		"--bound-object-kind=Pod", "--bound-object-name="+e.gatewayPod(thief), "--duration=10m"))
	cs := e.clientWithToken(tok)
	if _, _, denied := e.requestCert(cs, victim); !denied {
		e.t.Errorf("node identity: a request for %s under %s's gateway token was not denied", victim, thief)
	}
	cert, key, denied := e.requestCert(cs, thief)
	if denied || cert == nil {
		e.t.Fatalf("node identity: a request for %s under its own gateway pod's token was not issued", thief)
	}

	// The forged peer: gw2's certificate, from gw1's address.
	metric := `egret_gateway_sync_refusals_total{reason="peer_address"}`
	before := e.gatewayMetric(victim, metric)
	ns, err := netns.GetFromPath("/run/netns/egretc-" + victim)
	if err != nil {
		e.t.Fatal(err)
	}
	defer ns.Close()
	addr := net.JoinHostPort(plan.nodeIPs[victim], "9108")
	err = nsenter.Do(ns, func() error {
		d := &net.Dialer{Timeout: 5 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
			Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}}})
		if err != nil {
			return fmt.Errorf("TLS to %s: %w", addr, err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("%s kept the forged session open 10 s", addr)
		}
		return nil
	})
	if err != nil {
		e.t.Errorf("node identity: forged peer: %v", err)
	}
	nstest.Until(e.t, "gw1 counting the forged peer", 30*time.Second, func() (bool, string) {
		n := e.gatewayMetric(victim, metric)
		return n > before, fmt.Sprintf("%s %v, was %v", metric, n, before)
	})
	e.t.Logf("node identity: %s's certificate presented to %s's flow sync from %s was refused and counted", thief, victim, plan.nodeIPs[victim])
}

// issuedFor is the newest certificate of signer egret.io/gateway issued
// for node n and not expired, nil if none.
func (e *env) issuedFor(n string) *x509.Certificate {
	e.t.Helper()
	var list certv1.CertificateSigningRequestList
	if err := json.Unmarshal([]byte(e.kubectl("get", "csr", "-o", "json")), &list); err != nil {
		e.t.Fatal(err)
	}
	var best *x509.Certificate
	for _, c := range list.Items {
		if c.Spec.SignerName != identity.SignerName || len(c.Status.Certificate) == 0 {
			continue
		}
		b, _ := pem.Decode(c.Status.Certificate)
		if b == nil {
			continue
		}
		leaf, err := x509.ParseCertificate(b.Bytes)
		if err != nil || leaf.Subject.CommonName != n || time.Now().After(leaf.NotAfter) {
			continue
		}
		if best == nil || leaf.NotAfter.After(best.NotAfter) {
			best = leaf
		}
	}
	return best
}

// clientWithToken is a client of the cluster's API server that
// authenticates with tok alone.
func (e *env) clientWithToken(tok string) kubernetes.Interface {
	e.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(stateDir, "admin.kubeconfig"))
	if err != nil {
		e.t.Fatal(err)
	}
	anon := rest.AnonymousClientConfig(cfg)
	anon.BearerToken = tok
	cs, err := kubernetes.NewForConfig(anon)
	if err != nil {
		e.t.Fatal(err)
	}
	return cs
}

// requestCert files a gateway certificate request for node n as cs, the
// way a gateway agent does, and waits for the signer's verdict: the
// certificate and its key when issued, denied when refused (or when cs may
// not even file it).
func (e *env) requestCert(cs kubernetes.Interface, n string) (cert *x509.Certificate, key *ecdsa.PrivateKey, denied bool) {
	e.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		e.t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: n, Organization: []string{identity.GatewayOrg}}, DNSNames: []string{n}}, key)
	if err != nil {
		e.t.Fatal(err)
	}
	secs := int32(600)
	ctx := context.Background()
	csr, err := cs.CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-" + n + "-"},
		Spec: certv1.CertificateSigningRequestSpec{Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: identity.SignerName, ExpirationSeconds: &secs,
			Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth, certv1.UsageClientAuth}},
	}, metav1.CreateOptions{})
	if apierrors.IsForbidden(err) {
		e.t.Logf("node identity: a request for %s: %v", n, err)
		return nil, nil, true
	}
	if err != nil {
		e.t.Fatal(err)
	}
	defer e.kubectlErr("delete", "csr", csr.Name)
	var msg string
	nstest.Until(e.t, "the signer's verdict on "+csr.Name, 60*time.Second, func() (bool, string) {
		got, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range got.Status.Conditions {
			if c.Type == certv1.CertificateDenied {
				denied, msg = true, c.Message
				return true, ""
			}
		}
		if len(got.Status.Certificate) > 0 {
			b, _ := pem.Decode(got.Status.Certificate)
			if b == nil {
				return false, "status.certificate holds no PEM"
			}
			cert, err = x509.ParseCertificate(b.Bytes)
			return err == nil, fmt.Sprint(err)
		}
		return false, fmt.Sprintf("conditions %v", got.Status.Conditions)
	})
	if denied {
		e.t.Logf("node identity: a request for %s denied: %s", n, msg)
	}
	return cert, key, denied
}

// endTransition is the last step of an upgrade from the shared key
// (docs/operations.md, "Upgrade"): the Secret egret-flow-sync is deleted and
// the gateways restarted, so that their flow sync and health port take
// node certificates alone.
func (e *env) endTransition() {
	e.t.Helper()
	e.kubectl("-n", "egret-system", "delete", "secret", "egret-flow-sync", "--ignore-not-found")
	e.settled()
	e.kubectl("-n", "egret-system", "rollout", "restart", "daemonset/egret-gateway")
	e.settled()
	e.waitEgretReady()
	e.keyless = true
	e.t.Logf("the shared flow sync key deleted and the gateways restarted")
}
