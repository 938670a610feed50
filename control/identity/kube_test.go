package identity

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/certificate/csr"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/testbin"
)

const (
	ns = "egret-system"
	// controllerUser is deploy/rbac's controller ServiceAccount: the signer
	// runs with its rights only, so a missing RBAC rule fails the tests.
	controllerUser = "system:serviceaccount:egret-system:egret-controller"
	adminLabel     = "node-restriction.kubernetes.io/egress-gateway"
)

// kubeFixture is a real API server with deploy/rbac applied, the gateway
// ServiceAccount with the rights deploy gives it, nodes, and a running
// signer.
type kubeFixture struct {
	env     *kubetest.Env
	admin   kubernetes.Interface
	ctrl    kubernetes.Interface
	ca      *CA
	mu      sync.Mutex
	results map[string]int
}

func startKube(t *testing.T, signerLife time.Duration) *kubeFixture {
	return startKubeKeep(t, signerLife, 0)
}

// startKubeKeep is startKube with decided CSRs deleted after keep (0: the
// signer's hour).
func startKubeKeep(t *testing.T, signerLife, keep time.Duration) *kubeFixture {
	t.Helper()
	env := kubetest.Start(t)
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	must(admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	if out, err := env.Kubectl(t, "apply", "-f", filepath.Join(testbin.Root(t), "deploy", "rbac", "controller.yaml")); err != nil {
		t.Fatalf("applying deploy/rbac/controller.yaml: %v\n%s", err, out)
	}
	// What deploy gives the gateway: file and follow its CSRs, read the CA
	// ConfigMap (list and watch by name, for an informer).
	must(admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "egret-gateway"}}, metav1.CreateOptions{}))
	must(admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "egret-gateway-csr"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"},
			Verbs: []string{"create", "get", "list", "watch"}}}}, metav1.CreateOptions{}))
	must(admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "egret-gateway-csr"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "egret-gateway-csr"},
		Subjects: []rbacv1.Subject{
			{Kind: "ServiceAccount", Name: "egret-gateway", Namespace: ns},
			// Other requesters get the same right to ask: the rule must stop them.
			{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "alice"},
			{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "system:nodes"},
			{Kind: "ServiceAccount", Name: "other", Namespace: ns},
		}}, metav1.CreateOptions{}))
	must(admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "egret-gateway-identity-ca"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{CAName},
			Verbs: []string{"get", "list", "watch"}}}}, metav1.CreateOptions{}))
	must(admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "egret-gateway-identity-ca"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "egret-gateway-identity-ca"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "egret-gateway", Namespace: ns}}}, metav1.CreateOptions{}))
	must(admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}))

	gw := map[string]string{cluster.LabelEgressAssignable: "", adminLabel: "true"}
	for name, l := range map[string]map[string]string{
		"gw1": gw, "gw2": gw,
		"worker":           nil,
		"unadmin":          {cluster.LabelEgressAssignable: ""},
		"kubelet-labelled": {adminLabel: "true"},
	} {
		must(admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}, metav1.CreateOptions{}))
	}

	ctrl, err := kubernetes.NewForConfig(env.UserConfig(t, controllerUser, "system:serviceaccounts", "system:serviceaccounts:egret-system", "system:authenticated"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(ctx, ctrl, ns)
	if err != nil {
		t.Fatal(err)
	}
	f := &kubeFixture{env: env, admin: admin, ctrl: ctrl, ca: ca, results: map[string]int{}}
	sel, err := labels.Parse(adminLabel + "=true")
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(SignerConfig{Client: ctrl, CA: ca, NodeSelector: sel, Duration: signerLife, Log: testLog(t),
		Result: func(r string) { f.mu.Lock(); f.results[r]++; f.mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	if keep > 0 {
		s.keep = keep
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(sctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

// podClient is the API as the gateway pod on node sees it: a token bound to
// a pod of the gateway ServiceAccount (sa) scheduled on node.
func (f *kubeFixture) podClient(t *testing.T, sa, node string) kubernetes.Interface {
	t.Helper()
	ctx := t.Context()
	pod, err := f.admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-" + node + "-"},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "gateway", Image: "egret"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return f.tokenClient(t, sa, &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
}

func (f *kubeFixture) tokenClient(t *testing.T, sa string, bound *authv1.BoundObjectReference) kubernetes.Interface {
	t.Helper()
	tr, err := f.admin.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{BoundObjectRef: bound}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: f.env.Config.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: f.env.Config.CAData}}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *kubeFixture) userClient(t *testing.T, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(f.env.UserConfig(t, user, append(groups, "system:authenticated")...))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// request is a CSR as a test files it; the zero fields are the gateway's.
type request struct {
	cn, org string
	dns     []string
	ips     []net.IP
	usages  []certv1.KeyUsage
	key     crypto.Signer
}

// file files r as client and waits for the signer's decision: the
// certificate, or the error that carries the Denied condition.
func file(t *testing.T, client kubernetes.Interface, r request) ([]byte, error) {
	t.Helper()
	if r.org == "" {
		r.org = GatewayOrg
	}
	if r.dns == nil {
		r.dns = []string{r.cn}
	}
	if r.usages == nil {
		r.usages = gatewayUsages
	}
	if r.key == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		r.key = k
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: r.cn, Organization: []string{r.org}}, DNSNames: r.dns, IPAddresses: r.ips}, r.key)
	if err != nil {
		t.Fatal(err)
	}
	d := 24 * time.Hour
	name, uid, err := csr.RequestCertificateWithContext(t.Context(), client, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		csrName(r.cn), SignerName, &d, r.usages, r.key)
	if err != nil {
		t.Fatalf("filing the CSR: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	return csr.WaitForCertificate(ctx, client, name, uid)
}

// TestNodeNameExtra checks what the approval rule stands on: this API
// server puts the node of a pod-bound token in the CSR's spec.extra.
func TestNodeNameExtra(t *testing.T) {
	f := startKube(t, 0)
	c := f.podClient(t, "egret-gateway", "gw1")
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}}, k)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := c.CertificatesV1().CertificateSigningRequests().Create(t.Context(), &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "probe-extra"},
		Spec: certv1.CertificateSigningRequestSpec{SignerName: "example.com/none", Usages: gatewayUsages,
			Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("username %q extra %v", obj.Spec.Username, obj.Spec.Extra)
	if got := obj.Spec.Extra[NodeNameExtra]; len(got) != 1 || got[0] != "gw1" {
		t.Fatalf("spec.extra[%s] = %q, want [gw1]", NodeNameExtra, got)
	}
	if obj.Spec.Username != "system:serviceaccount:egret-system:egret-gateway" {
		t.Fatalf("username %q", obj.Spec.Username)
	}
}

func TestSigner(t *testing.T) {
	f := startKube(t, 0)
	gw1 := f.podClient(t, "egret-gateway", "gw1")

	t.Run("issued", func(t *testing.T) {
		r, err := NewRequester(RequesterConfig{Client: gw1, Namespace: ns, Node: "gw1", Log: testLog(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		go r.Run(ctx)
		select {
		case <-r.Store().Ready():
		case <-ctx.Done():
			t.Fatal("no certificate within a minute")
		}
		cert, _, err := r.Store().current()
		if err != nil {
			t.Fatal(err)
		}
		leaf := cert.Leaf
		if node, err := GatewayNode(leaf); err != nil || node != "gw1" {
			t.Fatalf("GatewayNode = %q, %v", node, err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: f.ca.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Fatalf("server auth: %v", err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: f.ca.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("client auth: %v", err)
		}
		if life := time.Until(leaf.NotAfter); life > DefaultCertDuration || life < DefaultCertDuration-time.Minute {
			t.Fatalf("life %v, want the default %v", life, DefaultCertDuration)
		}
		if Controller(leaf) == nil {
			t.Fatal("a gateway certificate passes as the controller's")
		}
	})

	denied := []struct {
		name   string
		client func(t *testing.T) kubernetes.Interface
		req    request
		reason string
	}{
		{"another node's name", func(*testing.T) kubernetes.Interface { return gw1 }, request{cn: "gw2"}, `bound to node ["gw1"]`},
		{"not egress-assignable", func(t *testing.T) kubernetes.Interface { return f.podClient(t, "egret-gateway", "worker") }, request{cn: "worker"}, "may not host egress IPs"},
		{"without the admin label", func(t *testing.T) kubernetes.Interface { return f.podClient(t, "egret-gateway", "unadmin") }, request{cn: "unadmin"}, "may not host egress IPs"},
		{"admin label only", func(t *testing.T) kubernetes.Interface { return f.podClient(t, "egret-gateway", "kubelet-labelled") }, request{cn: "kubelet-labelled"}, "may not host egress IPs"},
		{"a user", func(t *testing.T) kubernetes.Interface { return f.userClient(t, "alice") }, request{cn: "gw1"}, `requested by "alice"`},
		{"a kubelet", func(t *testing.T) kubernetes.Interface { return f.userClient(t, "system:node:gw1", "system:nodes") }, request{cn: "gw1"}, `requested by "system:node:gw1"`},
		{"another service account", func(t *testing.T) kubernetes.Interface { return f.podClient(t, "other", "gw1") }, request{cn: "gw1"}, "not by the gateway ServiceAccount"},
		{"a token not bound to a pod", func(t *testing.T) kubernetes.Interface { return f.tokenClient(t, "egret-gateway", nil) }, request{cn: "gw1"}, "bound to node []"},
		{"an IP SAN", func(*testing.T) kubernetes.Interface { return gw1 }, request{cn: "gw1", ips: []net.IP{net.ParseIP("192.0.2.1")}}, "subject alternative names"},
		{"another DNS SAN", func(*testing.T) kubernetes.Interface { return gw1 }, request{cn: "gw1", dns: []string{"gw1", "gw2"}}, "subject alternative names"},
		{"the controller's organisation", func(*testing.T) kubernetes.Interface { return gw1 }, request{cn: "gw1", org: ControllerOrg}, "subject"},
		{"usages without client auth", func(*testing.T) kubernetes.Interface { return gw1 },
			request{cn: "gw1", usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}}, "usages"},
		{"usages with more", func(*testing.T) kubernetes.Interface { return gw1 },
			request{cn: "gw1", usages: append([]certv1.KeyUsage{certv1.UsageKeyEncipherment}, gatewayUsages...)}, "usages"},
		{"an RSA key", func(*testing.T) kubernetes.Interface { return gw1 }, request{cn: "gw1", key: rsaKey(t)}, "only ECDSA P-256"},
		{"a P-384 key", func(*testing.T) kubernetes.Interface { return gw1 }, request{cn: "gw1", key: p384Key(t)}, "only ECDSA P-256"},
	}
	for _, tc := range denied {
		t.Run("denied/"+tc.name, func(t *testing.T) {
			cert, err := file(t, tc.client(t), tc.req)
			if err == nil {
				leaf, _ := x509.ParseCertificate(pemBytes(cert))
				t.Fatalf("issued %v; want denied with %q", leaf.Subject, tc.reason)
			}
			if !strings.Contains(err.Error(), "denied") || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("got %v; want denied with %q", err, tc.reason)
			}
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.results[ResultIssued] != 1 || f.results[ResultDenied] != len(denied) {
		t.Fatalf("results %v, want 1 issued and %d denied", f.results, len(denied))
	}
}

// TestRenewal: the signer's short life makes the gateway renew; a listener
// started on the first certificate serves the next one, with a new key.
func TestRenewal(t *testing.T) {
	const life = 10 * time.Second
	f := startKube(t, life)
	r, err := NewRequester(RequesterConfig{Client: f.podClient(t, "egret-gateway", "gw1"), Namespace: ns, Node: "gw1", Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st := r.Store()
	changed := st.watch()
	go r.Run(ctx)
	select {
	case <-st.Ready():
	case <-ctx.Done():
		t.Fatal("no certificate within a minute")
	}
	first, _, _ := st.current()
	if got := first.Leaf.NotAfter.Sub(first.Leaf.NotBefore); got != life+backdate {
		t.Fatalf("certificate life %v, want the signer's cap %v (+%v backdated)", got, life, backdate)
	}

	ctrl, err := ControllerStore(ctx, f.ca, time.Hour, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	ln := serve(t, st.ServerTLS(Controller))
	served := func() *x509.Certificate {
		t.Helper()
		var got *x509.Certificate
		cfg := ctrl.ClientTLS(func(leaf *x509.Certificate, _ string) error { got = leaf; _, err := GatewayNode(leaf); return err })
		c, err := tls.Dial("tcp", ln, cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		return got
	}
	if got := served(); !got.Equal(first.Leaf) {
		t.Fatal("the listener does not serve the first certificate")
	}
	for {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatal("no renewal within a minute")
		}
		changed = st.watch()
		if cur, _, _ := st.current(); cur != first {
			break
		}
	}
	next, _, _ := st.current()
	if next.Leaf.PublicKey.(*ecdsa.PublicKey).Equal(first.Leaf.PublicKey) {
		t.Fatal("the renewed certificate has the old key")
	}
	if got := served(); !got.Equal(next.Leaf) {
		t.Fatal("the listener still serves the old certificate after renewal")
	}
}

// TestDeleteDecided: the signer deletes the CSRs it denied once they are
// older than its keep time (an hour; 2 s here), those it issued once their
// certificate has expired as well, and no others.
func TestDeleteDecided(t *testing.T) {
	// Certificates of 6 s: the issued CSR stays past the keep time,
	// until its certificate expires (Certified reads it).
	f := startKubeKeep(t, 6*time.Second, 2*time.Second)
	gw1 := f.podClient(t, "egret-gateway", "gw1")
	// A CSR of another signer, older than the keep time by the end, stays.
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "x"}}, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.CertificatesV1().CertificateSigningRequests().Create(t.Context(), &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "someone-elses"},
		Spec: certv1.CertificateSigningRequestSpec{SignerName: "example.com/other", Usages: gatewayUsages,
			Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	csrs := f.admin.CertificatesV1().CertificateSigningRequests()
	w, err := csrs.Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	issued, err := file(t, gw1, request{cn: "gw1"})
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	b, _ := pem.Decode(issued)
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file(t, gw1, request{cn: "gw2"}); err == nil {
		t.Fatal("gw2's name was issued to gw1")
	}
	deleted := map[string]bool{}
	timeout := time.After(time.Minute)
	for len(deleted) < 2 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch ended")
			}
			if c, isCSR := ev.Object.(*certv1.CertificateSigningRequest); isCSR && ev.Type == "DELETED" {
				if c.Spec.SignerName != SignerName {
					t.Fatalf("deleted %s of signer %s", c.Name, c.Spec.SignerName)
				}
				if len(c.Status.Certificate) > 0 && time.Now().Before(leaf.NotAfter) {
					t.Fatalf("deleted the issued %s before its certificate expired (%v)", c.Name, leaf.NotAfter)
				}
				deleted[c.Name] = true
			}
		case <-timeout:
			t.Fatalf("deleted %v within a minute, want the issued and the denied CSR", deleted)
		}
	}
	if _, err := csrs.Get(t.Context(), "someone-elses", metav1.GetOptions{}); err != nil {
		t.Fatalf("another signer's CSR: %v", err)
	}
}

// TestLoadCATwice: a second replica reads the CA the first made, and the
// ConfigMap publishes it; replicas starting at once agree on one CA; a
// replaced Secret (a new CA) is published in the ConfigMap.
func TestLoadCATwice(t *testing.T) {
	f := startKube(t, 0)
	ctx := t.Context()
	again, err := LoadCA(ctx, f.ctrl, ns)
	if err != nil {
		t.Fatal(err)
	}
	if !again.cert.Equal(f.ca.cert) || !again.key.Equal(f.ca.key) {
		t.Fatal("a second LoadCA made another CA")
	}
	published := func() []byte {
		t.Helper()
		cm, err := f.admin.CoreV1().ConfigMaps(ns).Get(ctx, CAName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return []byte(cm.Data[CAKey])
	}
	if !bytes.Equal(published(), f.ca.certPEM) {
		t.Fatal("the ConfigMap does not hold the CA certificate")
	}

	// Replicas starting together on an empty namespace.
	if err := f.admin.CoreV1().Secrets(ns).Delete(ctx, CAName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.admin.CoreV1().ConfigMaps(ns).Delete(ctx, CAName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cas := make([]*CA, 4)
	errs := make([]error, len(cas))
	var wg sync.WaitGroup
	for i := range cas {
		wg.Go(func() { cas[i], errs[i] = LoadCA(ctx, f.ctrl, ns) })
	}
	wg.Wait()
	for i, ca := range cas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if !ca.cert.Equal(cas[0].cert) {
			t.Fatalf("replicas %d and 0 hold different CAs", i)
		}
	}
	if cas[0].cert.Equal(f.ca.cert) || !bytes.Equal(published(), cas[0].certPEM) {
		t.Fatal("after the Secret and ConfigMap were deleted, the new CA is not the one published")
	}

	// A new CA in the Secret (the admin deleted it): the ConfigMap follows.
	if err := f.admin.CoreV1().Secrets(ns).Delete(ctx, CAName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh, err := LoadCA(ctx, f.ctrl, ns)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.cert.Equal(cas[0].cert) || !bytes.Equal(published(), fresh.certPEM) {
		t.Fatal("the ConfigMap still publishes the replaced CA")
	}

	// A Secret that holds no CA stops the controller with a reason.
	sec, err := f.admin.CoreV1().Secrets(ns).Get(ctx, CAName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Data[corev1.TLSPrivateKeyKey] = []byte("not a key")
	if _, err := f.admin.CoreV1().Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(ctx, f.ctrl, ns); err == nil || !strings.Contains(err.Error(), "delete it to make a new CA") {
		t.Fatalf("a broken CA Secret: %v, want an error saying what to do", err)
	}
}

func pemBytes(b []byte) []byte {
	if p, _ := pem.Decode(b); p != nil {
		return p.Bytes
	}
	return nil
}

func rsaKey(t *testing.T) crypto.Signer {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func p384Key(t *testing.T) crypto.Signer {
	k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
