package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/certificate/csr"
)

// Backoff of the Requester after a denied, failed or unanswered CSR.
const (
	firstBackoff = time.Second
	maxBackoff   = time.Minute
)

// MinRequestDuration is the shortest life a CSR may ask for
// (expirationSeconds 600, the API server's minimum). The signer's
// --node-cert-duration may still cap it lower.
const MinRequestDuration = 10 * time.Minute

// requestTimeout bounds the wait for one CSR to be decided. A pending CSR
// is not withdrawn (the gateway may not delete CSRs), so this is long
// enough not to pile them up while the controller is away.
const requestTimeout = 5 * time.Minute

// RequesterConfig configures a gateway's Requester.
type RequesterConfig struct {
	Client    kubernetes.Interface
	Namespace string // of the CA ConfigMap
	Node      string
	Duration  time.Duration // asked for; 0: DefaultCertDuration
	Log       *slog.Logger
}

// Requester keeps a gateway's node certificate: it files a CSR with a key
// made in memory, waits for the controller to sign it, and renews it with
// a new key at 2/3 of its life. It reads the CA from the ConfigMap
// egret-identity-ca and follows its changes.
type Requester struct {
	cfg   RequesterConfig
	store *Store
}

// NewRequester checks cfg.
func NewRequester(cfg RequesterConfig) (*Requester, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Node == "" {
		return nil, errors.New("the node certificate requester needs a client, the CA's namespace and the node name")
	}
	if cfg.Duration == 0 {
		cfg.Duration = DefaultCertDuration
	}
	if cfg.Duration < MinRequestDuration {
		return nil, fmt.Errorf("node certificate duration %v: the API server refuses a CSR that asks for less than %v", cfg.Duration, MinRequestDuration)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Requester{cfg: cfg, store: newStore()}, nil
}

// Store is where the certificate and the CA are kept.
func (r *Requester) Store() *Store { return r.store }

// Run follows the CA and keeps a certificate until ctx ends.
func (r *Requester) Run(ctx context.Context) {
	go r.watchCA(ctx)
	backoff := firstBackoff
	for ctx.Err() == nil {
		cert, err := r.request(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.cfg.Log.Warn("node certificate: will ask again", "node", r.cfg.Node, "in", backoff, "err", err)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = firstBackoff
		r.store.setCert(cert)
		r.cfg.Log.Info("node certificate: issued", "node", r.cfg.Node, "notAfter", cert.Leaf.NotAfter)
		r.waitRenewal(ctx, cert.Leaf.NotAfter)
	}
}

// waitRenewal returns at 2/3 of the certificate's life, or at once when a
// new CA arrives that the certificate does not chain to.
func (r *Requester) waitRenewal(ctx context.Context, notAfter time.Time) {
	t := time.NewTimer(renewIn(time.Now(), notAfter))
	defer t.Stop()
	for {
		changed := r.store.watch()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-changed:
			if !r.store.verifiesAgainstCA() {
				r.cfg.Log.Info("node certificate: the CA changed; asking for a new certificate", "node", r.cfg.Node)
				return
			}
		}
	}
}

// request files one CSR and waits for its certificate.
func (r *Requester) request(ctx context.Context) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating a key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: r.cfg.Node, Organization: []string{GatewayOrg}},
		DNSNames: []string{r.cfg.Node},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("making the CSR: %w", err)
	}
	name := csrName(r.cfg.Node)
	d := r.cfg.Duration
	name, uid, err := csr.RequestCertificateWithContext(ctx, r.cfg.Client,
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), name, SignerName, &d, gatewayUsages, key)
	if err != nil {
		return nil, fmt.Errorf("filing the CSR: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	certPEM, err := csr.WaitForCertificate(wctx, r.cfg.Client, name, uid)
	if err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("CSR %s not decided within %v (is the controller running with --node-identity=csr?)", name, requestTimeout)
		}
		return nil, fmt.Errorf("CSR %s: %w", name, err)
	}
	return r.certificate(certPEM, key)
}

// certificate checks what the signer returned: a gateway certificate for
// this node, of this key, chaining to the CA when it is known.
func (r *Requester) certificate(certPEM []byte, key *ecdsa.PrivateKey) (*tls.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("the issued certificate is not PEM")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the issued certificate does not parse: %w", err)
	}
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("the issued certificate is not for the key that asked for it")
	}
	if node, err := GatewayNode(leaf); err != nil || node != r.cfg.Node {
		return nil, fmt.Errorf("the issued certificate is not a gateway certificate for node %s (%v)", r.cfg.Node, err)
	}
	cert := &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	if ca := r.store.caPool(); ca != nil {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return nil, fmt.Errorf("the issued certificate does not chain to the CA of the ConfigMap %s: %w", CAName, err)
		}
	}
	return cert, nil
}

// watchCA follows the ConfigMap that publishes the CA.
func (r *Requester) watchCA(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(r.cfg.Client, 0,
		informers.WithNamespace(r.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", CAName).String()
		}))
	inf := factory.Core().V1().ConfigMaps().Informer()
	update := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok || cm.Name != CAName {
			return
		}
		data := []byte(cm.Data[CAKey])
		pool, err := parseCABundle(data)
		if err != nil {
			r.cfg.Log.Error("node certificate: the CA ConfigMap is unusable; keeping the CA held", "configmap", r.cfg.Namespace+"/"+CAName, "err", err)
			return
		}
		if r.store.setCA(data, pool) {
			r.cfg.Log.Info("node certificate: CA loaded", "configmap", r.cfg.Namespace+"/"+CAName)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    update,
		UpdateFunc: func(_, obj any) { update(obj) },
	}); err != nil {
		r.cfg.Log.Error("node certificate: watching the CA", "err", err)
		return
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
}

// csrName is egret-gateway-<node>-<5 random>, the node part cut so the
// name stays a valid object name (253 characters).
func csrName(node string) string {
	const prefix, maxLen = "egret-gateway-", 253
	if n := maxLen - len(prefix) - 6; len(node) > n {
		node = node[:n]
	}
	return prefix + node + "-" + utilrand.String(5)
}
