package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/egret-gw/egret/control/cluster"
)

// NodeNameExtra is the user-info extra of a request made with a pod-bound
// ServiceAccount token: the node the pod is bound to. Only the API server
// writes it, from the token it verified.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// DefaultGatewayServiceAccount is the ServiceAccount ("namespace:name")
// whose pods may ask for gateway certificates.
const DefaultGatewayServiceAccount = "egret-system:egret-gateway"

// keepFinished is how long an issued or denied CSR of this signer stays.
const keepFinished = time.Hour

// Results counted by SignerConfig.Result.
const (
	ResultIssued = "issued"
	ResultDenied = "denied"
)

// The usages a gateway CSR must ask for, no more, no fewer.
var gatewayUsages = []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth, certv1.UsageClientAuth}

// SignerConfig configures the controller's CSR signer.
type SignerConfig struct {
	Client kubernetes.Interface
	CA     *CA
	// ServiceAccount is the gateways' ServiceAccount, "namespace:name"
	// (DefaultGatewayServiceAccount when empty).
	ServiceAccount string
	// NodeSelector is what a node must match, besides the egress-assignable
	// label, to be a gateway node (the controller's --node-selector); nil
	// or empty: the label alone.
	NodeSelector labels.Selector
	// Duration caps the life of a gateway certificate (DefaultCertDuration
	// when 0); a CSR may ask for less with expirationSeconds.
	Duration time.Duration
	Log      *slog.Logger
	// Result, if set, is called with ResultIssued or ResultDenied for each
	// CSR decided.
	Result func(result string)
}

// Signer approves and signs, or denies, the CSRs of SignerName, and
// deletes denied ones after an hour and issued ones once their
// certificate has expired. Only the leader runs it.
type Signer struct {
	cfg      SignerConfig
	username string
	keep     time.Duration // keepFinished; shorter in tests

	synced chan struct{} // closed once lister has read every CSR of SignerName
	lister certlisters.CertificateSigningRequestLister
}

// NewSigner checks cfg.
func NewSigner(cfg SignerConfig) (*Signer, error) {
	if cfg.Client == nil || cfg.CA == nil {
		return nil, errors.New("the identity signer needs a client and the CA")
	}
	if cfg.ServiceAccount == "" {
		cfg.ServiceAccount = DefaultGatewayServiceAccount
	}
	ns, name, err := SplitServiceAccount(cfg.ServiceAccount)
	if err != nil {
		return nil, err
	}
	if cfg.NodeSelector == nil {
		cfg.NodeSelector = labels.Everything()
	}
	if cfg.Duration <= 0 {
		cfg.Duration = DefaultCertDuration
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Result == nil {
		cfg.Result = func(string) {}
	}
	return &Signer{cfg: cfg, username: "system:serviceaccount:" + ns + ":" + name, keep: keepFinished, synced: make(chan struct{})}, nil
}

// Synced is closed once the signer has read every CSR of its signer:
// Certified answers for the whole cluster from then on.
func (s *Signer) Synced() <-chan struct{} { return s.synced }

// Certified reports whether node holds a gateway certificate of this CA
// that has not expired, as the CSRs of this signer record it (issued ones
// are kept until their certificate expires, so a new leader knows too).
// The probe then trusts only that node's TLS answer; a node without one
// is a gateway of the previous release (an upgrade) or one still waiting
// for its certificate. False before Synced.
func (s *Signer) Certified(node string) bool {
	select {
	case <-s.synced:
	default:
		return false
	}
	csrs, err := s.lister.List(labels.Everything())
	if err != nil {
		return false
	}
	now := time.Now()
	for _, c := range csrs {
		if leaf := s.issuedLeaf(c); leaf != nil && leaf.Subject.CommonName == node && now.Before(leaf.NotAfter) {
			return true
		}
	}
	return false
}

// issuedLeaf is the certificate this CA issued in csr, nil if none.
func (s *Signer) issuedLeaf(csr *certv1.CertificateSigningRequest) *x509.Certificate {
	if csr.Spec.SignerName != SignerName || len(csr.Status.Certificate) == 0 {
		return nil
	}
	b, _ := pem.Decode(csr.Status.Certificate)
	if b == nil {
		return nil
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil || leaf.CheckSignatureFrom(s.cfg.CA.cert) != nil {
		return nil
	}
	return leaf
}

// SplitServiceAccount splits "namespace:name".
func SplitServiceAccount(s string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(s, ":")
	if !ok || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", fmt.Errorf("gateway service account %q: write it namespace:name, e.g. %s", s, DefaultGatewayServiceAccount)
	}
	return namespace, name, nil
}

// Run handles CSRs until ctx ends.
func (s *Signer) Run(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(s.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", SignerName).String()
		}))
	inf := factory.Certificates().V1().CertificateSigningRequests()
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "egret-identity-signer"})
	enqueue := func(obj any) {
		if c, ok := obj.(*certv1.CertificateSigningRequest); ok {
			queue.Add(c.Name)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		s.cfg.Log.Error("identity signer: watching CSRs", "err", err)
		return
	}
	lister := inf.Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return
	}
	s.lister = lister
	close(s.synced)
	for {
		name, quit := queue.Get()
		if quit {
			return
		}
		after, err := s.sync(ctx, lister, name)
		switch {
		case err != nil && ctx.Err() == nil:
			s.cfg.Log.Warn("identity signer: handling a CSR, will retry", "csr", name, "err", err)
			queue.AddRateLimited(name)
		case after > 0:
			queue.Forget(name)
			queue.AddAfter(name, after)
		default:
			queue.Forget(name)
		}
		queue.Done(name)
	}
}

// sync decides one CSR; after > 0 asks to look at it again then (to delete it).
func (s *Signer) sync(ctx context.Context, lister certlisters.CertificateSigningRequestLister, name string) (after time.Duration, err error) {
	cached, err := lister.Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if cached.Spec.SignerName != SignerName {
		return 0, nil
	}
	approved, denied := conditions(cached)
	if denied || failed(cached) || (approved && len(cached.Status.Certificate) > 0) {
		wait := s.keep - time.Since(cached.CreationTimestamp.Time)
		if leaf := s.issuedLeaf(cached); leaf != nil {
			// Kept while its certificate is valid: it is how a leader
			// knows the node holds one (Certified).
			wait = max(wait, time.Until(leaf.NotAfter))
		}
		if wait > 0 {
			return wait, nil
		}
		err := s.cfg.Client.CertificatesV1().CertificateSigningRequests().Delete(ctx, name,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cached.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return 0, fmt.Errorf("deleting: %w", err)
		}
		return 0, nil
	}
	csr := cached.DeepCopy()
	req, refusal := s.check(ctx, csr)
	if refusal != nil {
		var transient *transientError
		if errors.As(refusal, &transient) {
			return 0, refusal
		}
		s.cfg.Log.Info("identity signer: denied a CSR", "csr", name, "user", csr.Spec.Username, "reason", refusal.Error())
		if approved {
			// Approved by someone else, but not signable by our rule.
			csr.Status.Conditions = append(csr.Status.Conditions, condition(certv1.CertificateFailed, "EgretRuleNotMet", refusal.Error()))
			if _, err := s.cfg.Client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
				return 0, fmt.Errorf("marking failed: %w", err)
			}
			return s.keep, nil
		}
		csr.Status.Conditions = append(csr.Status.Conditions, condition(certv1.CertificateDenied, "EgretRuleNotMet", refusal.Error()))
		if _, err := s.cfg.Client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, csr, metav1.UpdateOptions{}); err != nil {
			return 0, fmt.Errorf("denying: %w", err)
		}
		s.cfg.Result(ResultDenied)
		return s.keep, nil
	}
	life := s.cfg.Duration
	if e := csr.Spec.ExpirationSeconds; e != nil && *e > 0 {
		life = min(life, time.Duration(*e)*time.Second)
	}
	der, err := s.cfg.CA.issue(&x509.Certificate{
		Subject:     req.Subject,
		DNSNames:    req.DNSNames,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, req.PublicKey, life)
	if err != nil {
		return 0, err
	}
	if !approved {
		csr.Status.Conditions = append(csr.Status.Conditions, condition(certv1.CertificateApproved, "EgretGatewayNode",
			fmt.Sprintf("the gateway pod on node %s asked for its node's certificate", req.Subject.CommonName)))
		if csr, err = s.cfg.Client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, csr, metav1.UpdateOptions{}); err != nil {
			return 0, fmt.Errorf("approving: %w", err)
		}
	}
	csr.Status.Certificate = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if _, err := s.cfg.Client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		return 0, fmt.Errorf("writing the certificate: %w", err)
	}
	s.cfg.Log.Info("identity signer: issued a gateway certificate", "csr", name, "node", req.Subject.CommonName, "life", life)
	s.cfg.Result(ResultIssued)
	return s.keep, nil
}

// transientError is a failure to check (the API server), not a refusal.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// check applies the approval rule (docs/identity.md). It returns the
// parsed request, or why it is refused: a *transientError when the rule
// could not be checked.
func (s *Signer) check(ctx context.Context, csr *certv1.CertificateSigningRequest) (*x509.CertificateRequest, error) {
	if csr.Spec.Username != s.username {
		return nil, fmt.Errorf("requested by %q, not by the gateway ServiceAccount %s", csr.Spec.Username, s.username)
	}
	block, rest := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" || len(strings.TrimSpace(string(rest))) > 0 {
		return nil, errors.New("spec.request is not exactly one PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("spec.request does not parse: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("spec.request's self-signature does not verify: %w", err)
	}
	node := req.Subject.CommonName
	if node == "" || !slices.Equal(req.Subject.Organization, []string{GatewayOrg}) || len(req.Subject.Names) != 2 {
		return nil, fmt.Errorf("the subject %q must be exactly CN=<node name>, O=%s", req.Subject.String(), GatewayOrg)
	}
	if !slices.Equal(req.DNSNames, []string{node}) || len(req.IPAddresses) > 0 || len(req.URIs) > 0 || len(req.EmailAddresses) > 0 {
		return nil, fmt.Errorf("the subject alternative names must be exactly DNS:%s (DNS %q, IP %v, URI %v, e-mail %q)",
			node, req.DNSNames, req.IPAddresses, req.URIs, req.EmailAddresses)
	}
	if k, ok := req.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		return nil, fmt.Errorf("the key is a %s key; only ECDSA P-256 is signed", keyKind(req.PublicKey))
	}
	if len(csr.Spec.Usages) != len(gatewayUsages) || !containsAll(csr.Spec.Usages, gatewayUsages) {
		return nil, fmt.Errorf("usages %q: exactly %q are signed", csr.Spec.Usages, gatewayUsages)
	}
	if got := csr.Spec.Extra[NodeNameExtra]; !slices.Equal(got, certv1.ExtraValue{node}) {
		return nil, fmt.Errorf("the requester's token is bound to node %q (user extra %s), not to %q, the node in the subject", []string(got), NodeNameExtra, node)
	}
	n, err := s.cfg.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("node %s does not exist", node)
	}
	if err != nil {
		return nil, &transientError{fmt.Errorf("reading node %s: %w", node, err)}
	}
	if !s.gatewayNode(n) {
		return nil, fmt.Errorf("node %s may not host egress IPs: it needs the label %s and to match the controller's node selector %q",
			node, cluster.LabelEgressAssignable, s.cfg.NodeSelector.String())
	}
	return req, nil
}

func (s *Signer) gatewayNode(n *corev1.Node) bool {
	_, ok := n.Labels[cluster.LabelEgressAssignable]
	return ok && s.cfg.NodeSelector.Matches(labels.Set(n.Labels))
}

func containsAll(have, want []certv1.KeyUsage) bool {
	for _, u := range want {
		if !slices.Contains(have, u) {
			return false
		}
	}
	return true
}

func keyKind(k any) string {
	switch k := k.(type) {
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name
	default:
		return strings.TrimPrefix(fmt.Sprintf("%T", k), "*")
	}
}

func conditions(csr *certv1.CertificateSigningRequest) (approved, denied bool) {
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certv1.CertificateApproved:
			approved = true
		case certv1.CertificateDenied:
			denied = true
		}
	}
	return approved, denied
}

func failed(csr *certv1.CertificateSigningRequest) bool {
	return slices.ContainsFunc(csr.Status.Conditions, func(c certv1.CertificateSigningRequestCondition) bool {
		return c.Type == certv1.CertificateFailed
	})
}

func condition(t certv1.RequestConditionType, reason, msg string) certv1.CertificateSigningRequestCondition {
	now := metav1.Now()
	return certv1.CertificateSigningRequestCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason,
		Message: msg, LastUpdateTime: now, LastTransitionTime: now}
}
