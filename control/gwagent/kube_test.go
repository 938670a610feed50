package gwagent

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/egret-gw/egret/control/cluster"

	egressv1 "github.com/egret-gw/egret/control/api/v1"
	"github.com/egret-gw/egret/internal/kubetest"
	"github.com/egret-gw/egret/internal/nstest"
	"github.com/egret-gw/egret/internal/testbin"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// gatewayUser is the identity the agent runs as in the test, with only the
// read rights a gateway agent needs.
const gatewayUser = "system:serviceaccount:egret-system:egret-gateway"

// cutProxy forwards TCP from a loopback port to the API server until Cut,
// and again after Restore: the agent loses and regains contact for real.
type cutProxy struct {
	addr, target string
	mu           sync.Mutex
	lis          net.Listener
	conns        []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	p := &cutProxy{target: target}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = lis.Addr().String()
	p.serve(lis)
	t.Cleanup(p.Cut)
	return p
}

func (p *cutProxy) serve(lis net.Listener) {
	p.mu.Lock()
	p.lis = lis
	p.mu.Unlock()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close() }()
			go func() { io.Copy(c, u); c.Close() }()
		}
	}()
}

// Cut closes the listener and every forwarded connection.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lis != nil {
		p.lis.Close()
		p.lis = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Restore listens again on the same port.
func (p *cutProxy) Restore(t *testing.T) {
	lis, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.serve(lis)
}

// gatewayReads are the rights docs/gateway-agent.md lists for reading the
// cluster, and no more.
var gatewayReads = []rbacv1.PolicyRule{
	{APIGroups: []string{"k8s.ovn.org"}, Resources: []string{"egressips", "egressiptraffics"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"nodes", "namespaces", "pods"}, Verbs: []string{"get", "list", "watch"}},
}

// gatewayWithEvents adds to gatewayReads the rights the gateway's Events
// need (deploy/gateway/rbac.yaml).
var gatewayWithEvents = append(slices.Clone(gatewayReads),
	rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}})

// gatewayCluster is a real kube-apiserver holding what the gateway agent
// tests read: namespace shop (env=prod), nodes g1 (this gateway) and w1,
// the Running pod shop/web on w1 (nsPod) and EgressIP blue (nsEgressIP,
// selecting shop), not yet placed.
type gatewayCluster struct {
	t    *testing.T
	env  *kubetest.Env
	cs   *kubernetes.Clientset
	eipc *egressv1.Client
	web  *corev1.Pod
}

// startGatewayCluster starts it, with ClusterRole egret-gateway of rules
// bound to gatewayUser.
func startGatewayCluster(t *testing.T, rules []rbacv1.PolicyRule) *gatewayCluster {
	env := kubetest.Start(t)
	env.InstallCRDs(t, filepath.Join(testbin.Root(t), "deploy", "crd"))
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	eipc, err := egressv1.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "egret-gateway"}, Rules: rules}, metav1.CreateOptions{}))
	must(cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "egret-gateway"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "egret-gateway"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: gatewayUser}}}, metav1.CreateOptions{}))
	must(cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"env": "prod"}}}, metav1.CreateOptions{}))
	for _, n := range []*corev1.Node{
		node("g1", "10.78.0.1", map[string]string{"egret.io/vtep": "10.78.0.1"}),
		node("w1", "10.78.0.2", map[string]string{"egret.io/vtep": "10.78.0.2", cluster.AnnotationTunnelMAC: "02:65:67:00:00:11"}),
	} {
		must(cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}))
	}
	p := pod("shop", "web", "w1", map[string]string{"app": "web"})
	p.Spec.Containers = []corev1.Container{{Name: "c", Image: "x"}}
	p, err = cs.CoreV1().Pods("shop").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = nsPod.String()
	p.Status.PodIPs = []corev1.PodIP{{IP: nsPod.String()}}
	p, err = cs.CoreV1().Pods("shop").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	must(eipc.Create(ctx, eip("blue", []string{nsEgressIP.String()}, map[string]string{"env": "prod"}, nil), metav1.CreateOptions{}))
	return &gatewayCluster{t: t, env: env, cs: cs, eipc: eipc, web: p}
}

// place writes blue's status: its egress IP on node.
func (k *gatewayCluster) place(node string) {
	k.t.Helper()
	cur, err := k.eipc.Get(context.Background(), "blue", metav1.GetOptions{})
	if err != nil {
		k.t.Fatal(err)
	}
	cur.Status.Items = []egressv1.EgressIPStatusItem{{Node: node, EgressIP: nsEgressIP.String()}}
	if _, err := k.eipc.Update(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		k.t.Fatal(err)
	}
}

// TestAgentKube runs the agent against a real kube-apiserver through
// KubeSource, with read-only RBAC: an EgressIP whose status places its IP
// on this node is claimed, a move releases it, and losing the API server
// fences the node until it returns.
func TestAgentKube(t *testing.T) {
	tp, seen := newNsTopo(t) // first: needs root, fails under CI=true without it
	k := startGatewayCluster(t, gatewayReads)
	k.place("g1")

	user := k.env.UserConfig(t, gatewayUser, "system:authenticated")
	proxy := newCutProxy(t, strings.TrimPrefix(user.Host, "https://"))
	viaProxy := rest.CopyConfig(user)
	viaProxy.Host = "https://" + proxy.addr
	viaProxy.Timeout = 2 * time.Second
	src, err := cluster.NewKube(viaProxy)
	if err != nil {
		t.Fatal(err)
	}
	const fence = time.Second
	a, _ := startAgent(t, tp, src, fence)

	el := nstest.Eventually(t, "egress IP claimed from the API server's status", 20*time.Second, func() bool { return tp.hasAddr(t, nsEgressIP) })
	t.Logf("claimed %v after start", el)
	if from, reply := tp.roundTrip(t, seen, 41001); from.Addr() != nsEgressIP || reply == nil {
		t.Fatalf("server saw %v (reply %v); want the egress IP", from, reply != nil)
	}

	k.place("g2")
	el = nstest.Eventually(t, "released when the status moves it", 3*time.Second, func() bool { return !tp.hasAddr(t, nsEgressIP) })
	t.Logf("released %v after the status update", el)
	k.place("g1")
	nstest.Eventually(t, "claimed again", 3*time.Second, func() bool { return tp.hasAddr(t, nsEgressIP) })

	proxy.Cut()
	el = nstest.Eventually(t, "fenced when the API server is unreachable", fence+3*time.Second, func() bool { return !tp.hasAddr(t, nsEgressIP) })
	t.Logf("fenced %v after the API server became unreachable (fence-after %v)", el, fence)
	if !a.State().Fenced || a.State().Serving {
		t.Errorf("state while fenced: %+v", a.State())
	}
	proxy.Restore(t)
	el = nstest.Eventually(t, "claimed when the API server is back", 10*time.Second, func() bool { return tp.hasAddr(t, nsEgressIP) })
	t.Logf("claimed again %v after the API server came back", el)
	if a.State().Fenced {
		t.Error("still fenced")
	}
}

// TestKubeSourceEvents: an Event the gateway agent records through its
// source (as cmd/egret wires it) carries source egret-gateway, not the
// controller's name.
func TestKubeSourceEvents(t *testing.T) {
	k := startGatewayCluster(t, gatewayWithEvents)
	cs := k.cs
	src, err := NewKubeSource(k.env.UserConfig(t, gatewayUser, "system:authenticated"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := src.Start(ctx, func(cluster.Kind) {}); err != nil {
		t.Fatal(err)
	}
	src.Event(&corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "default", Name: "web"}, corev1.EventTypeWarning, ReasonDestinationDenied, "test")
	var got []corev1.Event
	nstest.Until(t, "the Event", 20*time.Second, func() (bool, string) {
		l, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = l.Items
		return len(got) > 0, fmt.Sprintf("%d Events", len(got))
	})
	if len(got) != 1 || got[0].Source.Component != "egret-gateway" || got[0].Reason != ReasonDestinationDenied {
		t.Fatalf("Events %+v, want one %s from egret-gateway", got, ReasonDestinationDenied)
	}
}
