package controller_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egret-gw/egret/control/cluster"
	"github.com/egret-gw/egret/control/controller"
	"github.com/egret-gw/egret/control/health"
	"github.com/egret-gw/egret/control/identity"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/promtest"
)

// TestNodeIdentityProbe runs the controller with --node-identity=csr on a
// real API server, with deploy/rbac's rights: it makes the CA, signs a
// gateway's CSR (the gateway asks with its pod's node-bound token), and
// probes over mutual TLS. gw1 answers with its own certificate and is
// reachable; at gw2's address, gw2 holding a certificate of its own, a
// server presents gw1's certificate, and gw2 is not: a certificate proves
// its node, not any gateway. gw3 holds none and answers plain gRPC (a
// gateway of the previous release, during an upgrade): reachable, until
// the signer issues gw3 a certificate; from then on only a TLS answer of
// gw3 counts, and its plain one makes it unreachable.
func TestNodeIdentityProbe(t *testing.T) {
	env, cs, _, user := startAPI(t)
	ctx := t.Context()
	gatewayRBAC(t, cs)

	// Two gateway addresses on loopback, one port (the controller probes
	// every node at the same health port).
	l1, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l1.Addr().(*net.TCPAddr).Port
	l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.3", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	l3, err := net.Listen("tcp", net.JoinHostPort("127.0.0.4", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	for name, ip := range map[string]string{"gw1": "127.0.0.2", "gw2": "127.0.0.3", "gw3": "127.0.0.4"} {
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{cluster.LabelEgressAssignable: ""}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status = corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	reg := prometheus.NewPedanticRegistry()
	m := controller.NewMetrics(reg)
	timeout := 1
	cctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- controller.RunKube(cctx, user, controller.Config{
			ReachabilityTotalTimeoutSeconds: &timeout,
			HealthPort:                      port,
			HoldDown:                        &metav1.Duration{},
			LeaderElection:                  controller.LeaderElection{Disabled: true},
			NodeIdentity:                    controller.NodeIdentityCSR,
		}, "", testLogger(t), m)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})

	// The gateways on gw1 and gw2 ask for their certificates; gw1's
	// serves both health ports.
	st := certify(t, env.Config, cs, "gw1")
	certify(t, env.Config, cs, "gw2")
	tc := st.ServerTLS(identity.Controller)
	for _, l := range []net.Listener{l1, l2} {
		s := health.Serve(l, health.TLS(tc))
		t.Cleanup(func() { s.Stop() })
	}
	s3 := health.Serve(l3)
	t.Cleanup(func() { s3.Stop() })

	sample := func(name string, labels ...string) (float64, bool) {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		return promtest.Sample(fams, name, labels...)
	}
	reachable := func(want map[string]float64) func() (bool, string) {
		return func() (bool, string) {
			ok, got := true, map[string]float64{}
			for node, w := range want {
				v, known := sample("egret_controller_node_reachable", "node="+node)
				got[node] = v
				ok = ok && known && v == w
			}
			return ok, fmt.Sprintf("reachable %v, want %v", got, want)
		}
	}
	nstest.Until(t, "gw1 reachable over mutual TLS, gw2 (gw1's certificate at its address) not, gw3 (no certificate, plain) reachable",
		30*time.Second, reachable(map[string]float64{"gw1": 1, "gw2": 0, "gw3": 1}))
	if v, _ := sample("egret_controller_node_certificates_total", "result=issued"); v != 2 {
		t.Fatalf("egret_controller_node_certificates_total{result=issued} = %v, want 2", v)
	}
	certify(t, env.Config, cs, "gw3")
	nstest.Until(t, "gw3, once certified, not reachable by its plain answer", 30*time.Second,
		reachable(map[string]float64{"gw1": 1, "gw2": 0, "gw3": 0}))
	if v, ok := sample("egret_controller_node_certificates_total", "result=denied"); !ok || v != 0 {
		t.Fatalf("egret_controller_node_certificates_total{result=denied} = %v (%v), want 0", v, ok)
	}
}

// gatewayRBAC gives the gateway ServiceAccount what deploy gives it for
// node identity: its CSRs and the CA ConfigMap.
func gatewayRBAC(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	ns := "egret-system"
	sa := rbacv1.Subject{Kind: "ServiceAccount", Name: "egret-gateway", Namespace: ns}
	for _, err := range []error{
		create(cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "egret-gateway"}}, metav1.CreateOptions{})),
		create(cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-gateway-csr"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"},
				Verbs: []string{"create", "get", "list", "watch"}}}}, metav1.CreateOptions{})),
		create(cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-gateway-csr"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "test-gateway-csr"},
			Subjects: []rbacv1.Subject{sa}}, metav1.CreateOptions{})),
		create(cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "test-gateway-identity-ca"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{identity.CAName},
				Verbs: []string{"get", "list", "watch"}}}}, metav1.CreateOptions{})),
		create(cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-gateway-identity-ca"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "test-gateway-identity-ca"},
			Subjects: []rbacv1.Subject{sa}}, metav1.CreateOptions{})),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func create(_ any, err error) error { return err }

// certify runs the gateway's Requester for node, as its pod (podClient),
// until the test ends, and returns its store once it holds a certificate.
func certify(t *testing.T, admin *rest.Config, cs kubernetes.Interface, node string) *identity.Store {
	t.Helper()
	req, err := identity.NewRequester(identity.RequesterConfig{Client: podClient(t, admin, cs, node),
		Namespace: "egret-system", Node: node, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	go req.Run(t.Context())
	select {
	case <-req.Store().Ready():
	case <-time.After(time.Minute):
		t.Fatalf("%s got no certificate within a minute", node)
	}
	return req.Store()
}

// podClient is the API as the gateway pod on node sees it: a token bound to
// a pod of egret-gateway scheduled there.
func podClient(t *testing.T, admin *rest.Config, cs kubernetes.Interface, node string) kubernetes.Interface {
	t.Helper()
	ctx := t.Context()
	pod, err := cs.CoreV1().Pods("egret-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway-" + node},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "egret-gateway",
			Containers: []corev1.Container{{Name: "gateway", Image: "egret"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("egret-system").CreateToken(ctx, "egret-gateway", &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(&rest.Config{Host: admin.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNodeIdentityLeaderSigns: of two replicas with --node-identity=csr,
// only the leader signs; when it stops, the new leader signs, with the
// same CA (both loaded the one in the Secret).
func TestNodeIdentityLeaderSigns(t *testing.T) {
	env, cs, _, user := startAPI(t)
	ctx := t.Context()
	gatewayRBAC(t, cs)
	for _, name := range []string{"gw1", "gw2"} {
		if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{cluster.LabelEgressAssignable: ""}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	off := 0
	cfg := controller.Config{
		ReachabilityTotalTimeoutSeconds: &off,
		NodeIdentity:                    controller.NodeIdentityCSR,
		LeaderElection: controller.LeaderElection{
			LeaseDuration: metav1.Duration{Duration: 3 * time.Second},
			RenewDeadline: metav1.Duration{Duration: 2 * time.Second},
			RetryPeriod:   metav1.Duration{Duration: 250 * time.Millisecond},
		},
	}
	type replica struct {
		reg  *prometheus.Registry
		stop func() error // ends the replica, waits, returns RunKube's error
	}
	start := func(id string) *replica {
		r := &replica{reg: prometheus.NewPedanticRegistry()}
		m := controller.NewMetrics(r.reg)
		rctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- controller.RunKube(rctx, user, cfg, id, testLogger(t), m) }()
		r.stop = sync.OnceValue(func() error { cancel(); return <-done })
		t.Cleanup(func() { r.stop() })
		return r
	}
	issued := func(r *replica) float64 {
		fams, err := r.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		v, _ := promtest.Sample(fams, "egret_controller_node_certificates_total", "result=issued")
		return v
	}
	leads := func(id string) func() (bool, string) {
		return func() (bool, string) {
			l, err := cs.CoordinationV1().Leases("egret-system").Get(ctx, "egret-controller", metav1.GetOptions{})
			if err != nil || l.Spec.HolderIdentity == nil {
				return false, fmt.Sprint(err)
			}
			return *l.Spec.HolderIdentity == id, *l.Spec.HolderIdentity
		}
	}

	r1 := start("replica-1")
	nstest.Until(t, "replica-1 leads", 15*time.Second, leads("replica-1"))
	r2 := start("replica-2")
	st1 := certify(t, env.Config, cs, "gw1")
	// The count follows the certificate's write, which the gateway may see first.
	nstest.Until(t, "replica-1 counts the certificate it issued", 10*time.Second, func() (bool, string) {
		a := issued(r1)
		return a == 1, fmt.Sprint(a)
	})
	if b := issued(r2); b != 0 {
		t.Fatalf("replica-2, not leading, issued %v", b)
	}

	if err := r1.stop(); err != nil {
		t.Fatalf("replica-1: %v", err)
	}
	nstest.Until(t, "replica-2 takes over", 15*time.Second, leads("replica-2"))
	st2 := certify(t, env.Config, cs, "gw2")
	nstest.Until(t, "the new leader counts the certificate it issued", 10*time.Second, func() (bool, string) {
		b := issued(r2)
		return b == 1, fmt.Sprint(b)
	})
	// Same CA: gw1's certificate (signed by replica-1) and gw2's (by
	// replica-2) shake hands.
	srv := st1.ServerTLS(func(leaf *x509.Certificate) error { _, err := identity.GatewayNode(leaf); return err })
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), st2.ClientTLS(func(leaf *x509.Certificate, _ string) error {
		if n, err := identity.GatewayNode(leaf); err != nil || n != "gw1" {
			return fmt.Errorf("not gw1: %q %v", n, err)
		}
		return nil
	}))
	if err != nil {
		t.Fatalf("gw2 → gw1: %v", err)
	}
	c.Close()
}
